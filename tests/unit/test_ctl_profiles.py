"""Controller profiles: EV expansion (the OCP API's STEV and SRv6 examples),
the profile state machine and its error codes, CC profiles."""
import errno
import ipaddress

import pytest

from mrc.ctl import profiles as pr
from mrc.ctl.profiles import (
    AUTO,
    DENIED,
    EXPLICIT,
    GENERATED,
    GOOD,
    INIT,
    OFFLINE,
    ONLINE,
    SRV6,
    STEV,
    UDP,
    UNKNOWN,
    CCProfile,
    EVField,
    EVFormatProfile,
    EVProfile,
)
from mrc.errors import ErrnoError
from mrc.fabric.profiles import srv6_from_fabric, srv6_plane_fields
from mrc.fabric.topology import Topology


def code(excinfo) -> int:
    return excinfo.value.errno


def stev_example():
    fmt = EVFormatProfile(1, STEV, [8, 4, 4])
    fmt.online()
    prof = EVProfile(1, GENERATED, fmt, fields=[EVField(8, mask=0xFF), EVField(4, mask=0xF), EVField(4, mask=0xF)])
    return fmt, prof


def test_stev_example_generates_65536_evs_first_field_most_significant():
    fmt, prof = stev_example()
    assert prof.ev_count == 65536 and len(prof.entries) == 65536
    # EV i: first field = i >> 8, second = (i >> 4) & 15, third = i & 15, concatenated
    for i in (0, 1, 15, 16, 255, 256, 0x1234, 0xB4FF, 65535):
        assert prof.value(i) == i
    # on the wire: the low 20 bits in the flow label, the rest in the UDP source port
    assert pr.stev_fields(0xABCDE, fmt.width) == (0xABCDE, 0)
    assert pr.stev_fields(0xF_ABCDE, 36) == (0xABCDE, 0xF)


def test_stev_example_denies_first_field_values_that_name_no_link():
    fmt, prof = stev_example()
    for first in range(180, 256):
        for low in range(256):
            prof.set_ev_state((first << 8) | low, DENIED)
    prof.online()
    states = [e.state for e in prof.entries]
    assert states.count(DENIED) == 76 * 256
    assert all(s == GOOD for s in states[: 180 * 256]) and all(s == DENIED for s in states[180 * 256:])
    assert prof.ev_state(179 << 8) == GOOD and prof.ev_state(180 << 8) == DENIED
    # state changes are allowed ONLINE: allow one again
    prof.set_ev_state(200 << 8, GOOD)
    assert prof.ev_state(200 << 8) == GOOD


def test_mask_scatter_fills_the_mask_bits_lowest_first_over_init_val():
    f = EVField(8, init_val=0b0100_0000, mask=0b1010_0100)
    assert f.bits == 3 and f.count == 8
    assert [f.value(v) for v in range(8)] == [
        0b0100_0000, 0b0100_0100, 0b0110_0000, 0b0110_0100,
        0b1100_0000, 0b1100_0100, 0b1110_0000, 0b1110_0100]


def test_min_max_and_fixed_fields_and_left_padding_to_the_format_width():
    fmt = EVFormatProfile(2, UDP, [8, 8])
    fmt.online()
    # a fixed first field (init_val, zero mask) of 4 bits padded to its format's 8; a 3..5 counter
    prof = EVProfile(2, GENERATED, fmt, fields=[EVField(4, init_val=0xA), EVField(8, min_val=3, max_val=5, mask=0x0F)],
                     port=3)
    assert prof.ev_count == 3
    assert [e.value for e in prof.entries] == [0x0A03, 0x0A04, 0x0A05]
    assert {e.port for e in prof.entries} == {3}


def test_fewer_fields_than_format_fields_leave_the_low_bits_zero():
    fmt = EVFormatProfile(3, SRV6, [32, 16, 16])
    fmt.online()
    prof = EVProfile(3, GENERATED, fmt, fields=[EVField(32, init_val=0xFC000000), EVField(16, mask=0x3)])
    assert [pr.srv6_address(e.value, fmt.width) for e in prof.entries] == [
        "fc00::", "fc00:0:1::", "fc00:0:2::", "fc00:0:3::"]


def test_srv6_example_from_the_fabric_plan_matches_every_path_address():
    t = Topology(planes=4, spines=3, leaves=2, hosts=4)
    for src, dst in ((0, 3), (3, 0), (0, 1)):
        prof = srv6_from_fabric(t, src, dst)
        assert prof.mode == EXPLICIT and prof.ev_count == t.planes * t.spines and prof.state == OFFLINE
        want = {p: [t.path_address(src, dst, p, s) for s in range(t.spines)] for p in range(t.planes)}
        assert prof.paths() == want
        # the per-plane GENERATED form: upper 8 bits of the T1 uSID fixed, lower 8 generated
        f = srv6_plane_fields(t, src, dst, 1)
        assert f[2].init_val == 0x2100 and f[2].mask == 0x00FF and f[2].count == t.spines
        assert all(x.mask == 0 for i, x in enumerate(f) if i != 2)
    # a denied path leaves the profile's path list
    prof = srv6_from_fabric(t, 0, 3)
    bad = t.path_address(0, 3, 2, 1)
    prof.set_ev_state(int(ipaddress.IPv6Address(bad)) >> 32, DENIED)
    assert bad not in prof.paths()[2] and len(prof.paths()[2]) == t.spines - 1


@pytest.mark.parametrize("fields,why", [
    ([EVField(9, mask=1)], "width"),                        # wider than its format field (8)
    ([EVField(8, init_val=0x100)], "init_val"),             # init_val outside the field
    ([EVField(4, mask=0x10)], "mask"),                      # mask outside the field
    ([EVField(8, mask=0x3, max_val=4)], "max_val"),         # max_val beyond the mask's 2 bits
    ([EVField(8, mask=0x3, min_val=3, max_val=2)], "min_val"),
    ([EVField(8), EVField(8), EVField(8)], "fields but"),   # more fields than format fields
    ([], "at least one field"),
])
def test_field_rules_are_einval(fields, why):
    fmt = EVFormatProfile(1, UDP, [8, 8])
    with pytest.raises(ErrnoError, match=why) as e:
        EVProfile(1, GENERATED, fmt, fields=fields)
    assert code(e) == errno.EINVAL


def test_format_rules():
    with pytest.raises(ErrnoError) as e:
        EVFormatProfile(1, STEV, [20, 16, 1])  # 37 bits: STEV carries 36
    assert code(e) == errno.EINVAL and "36" in str(e.value)
    with pytest.raises(ErrnoError) as e:
        EVFormatProfile(1, "ROCE", [8])
    assert code(e) == errno.EINVAL
    with pytest.raises(ErrnoError) as e:
        EVFormatProfile(1, SRV6, [1] * 9)
    assert code(e) == errno.E2BIG


def test_state_machine_init_offline_online_and_back():
    fmt = EVFormatProfile(1)
    assert fmt.state == INIT
    with pytest.raises(ErrnoError) as e:
        fmt.online()  # INIT -> ONLINE skips configuration
    assert code(e) == errno.EINVAL
    fmt.modify(UDP, [16])
    assert fmt.state == OFFLINE
    prof = EVProfile(5, GENERATED, fmt, fields=[EVField(16, mask=0xF)])
    with pytest.raises(ErrnoError, match="bring it ONLINE") as e:
        prof.online()  # its format profile is still OFFLINE
    assert code(e) == errno.EINVAL
    fmt.online()
    prof.online()
    assert prof.state == ONLINE
    # ONLINE: modification is EBUSY, the format profile under it too
    for call in (lambda: prof.modify(AUTO, None, ev_count=8), lambda: prof.replace(0, 1, 1),
                 lambda: fmt.modify(UDP, [8]), fmt.offline, fmt.reset, prof.reset):
        with pytest.raises(ErrnoError) as e:
            call()
        assert code(e) == errno.EBUSY
    prof.offline()
    fmt.offline()  # nobody ONLINE uses it now
    prof.reset()
    fmt.reset()
    assert (prof.state, fmt.state) == (INIT, INIT)
    with pytest.raises(ErrnoError) as e:
        prof.offline()
    assert code(e) == errno.EINVAL


def test_explicit_profile_starts_unpopulated_and_must_be_filled_before_online():
    fmt = EVFormatProfile(1, STEV, [20, 16])
    fmt.online()
    prof = EVProfile(2, EXPLICIT, fmt, ev_count=4)
    assert prof.query_array(4) == [None] * 4
    for i in range(3):
        prof.replace(i, 0x100 + i, 1 + i)
    with pytest.raises(ErrnoError, match="1 of 4 EVs unpopulated") as e:
        prof.online()
    assert code(e) == errno.EINVAL
    prof.replace(3, 0x100, 2)       # a second copy of EV 0x100
    assert prof.replace(0, 0x200, 4, all_copies=True) == 2  # both copies replaced
    assert [e["value"] for e in prof.query_array(8)] == [0x200, 0x101, 0x102, 0x200]
    prof.online()
    with pytest.raises(ErrnoError) as e:
        prof.query_array(3)
    assert code(e) == errno.E2BIG and e.value.needed == 4
    with pytest.raises(ErrnoError) as e:
        prof.set_ev_state(0x999, DENIED)
    assert code(e) == errno.ENOENT
    with pytest.raises(ErrnoError) as e:
        prof.replace(9, 1, 1)
    assert code(e) in (errno.EBUSY, errno.ENOENT)
    prof.offline()
    with pytest.raises(ErrnoError) as e:
        prof.replace(9, 1, 1)
    assert code(e) == errno.ENOENT
    with pytest.raises(ErrnoError) as e:
        prof.replace(0, 1 << 36, 1)
    assert code(e) == errno.EINVAL


def test_ev_count_limits_and_ev_min_active():
    fmt = EVFormatProfile(1, UDP, [16])
    with pytest.raises(ErrnoError) as e:
        EVProfile(1, EXPLICIT, fmt, ev_count=pr.LIMITS.max_evs_per_profile + 1)
    assert code(e) == errno.E2BIG and e.value.needed == pr.LIMITS.max_evs_per_profile + 1
    with pytest.raises(ErrnoError) as e:
        EVProfile(1, GENERATED, fmt, fields=[EVField(16, mask=0x3)], ev_count=5)  # 4 generated
    assert code(e) == errno.EINVAL
    prof = EVProfile(1, GENERATED, fmt, fields=[EVField(16, mask=0x3)], ev_min_active=3)
    prof.set_ev_state(0, DENIED)
    with pytest.raises(ErrnoError, match="ev_min_active") as e:
        prof.set_ev_state(1, DENIED)
    assert code(e) == errno.EBUSY
    with pytest.raises(ErrnoError) as e:
        prof.set_ev_state(1, "ASSUMED_BAD")  # the device sets that one, not the controller
    assert code(e) == errno.EINVAL
    assert UNKNOWN in pr.EV_STATES


def test_auto_profile_needs_only_a_count():
    prof = EVProfile(7, AUTO, None, ev_count=128, ev_min_active=8)
    prof.online()
    assert prof.query()["mode"] == AUTO and prof.ev_count == 128
    with pytest.raises(ErrnoError) as e:
        EVProfile(8, EXPLICIT, None, ev_count=4)
    assert code(e) == errno.EINVAL


def test_cc_profile_nscc_named_parameters():
    cc = CCProfile(1, "uet-1.0-nscc", {"base_rtt": 100_000, "max_cwnd": 500_000, "disable_qa": 1})
    assert cc.state == OFFLINE and cc.query()["config"]["max_cwnd"] == 500_000
    cc.online()
    with pytest.raises(ErrnoError) as e:
        cc.modify("uet-1.0-nscc", {})
    assert code(e) == errno.EBUSY
    cc.offline()
    for algorithm, cfg in (("cubic", {}), ("uet-1.0-nscc", {"bogus": 1}), ("uet-1.0-nscc", {"disable_qa": 2}),
                           ("uet-1.0-nscc", {"md_by_sample": 2}), ("uet-1.0-nscc", {"md_by_sample": True}),
                           ("uet-1.0-nscc", {"eta": -1}), ("uet-1.0-nscc", {"max_cwnd": 0})):
        with pytest.raises(ErrnoError) as e:
            cc.modify(algorithm, cfg)
        assert code(e) == errno.EINVAL, (algorithm, cfg)
    assert set(pr.NSCC_FIELDS) == {"disable_qa", "adjust_bytes_threshold", "adjust_period_threshold", "base_rtt",
                                   "eta", "fi", "fi_scale", "gamma", "max_md_jump", "max_cwnd", "md_by_sample",
                                   "qa_gate", "qa_threshold", "target_delay"}


def test_every_nscc_field_a_cc_profile_takes_is_one_the_engine_has():
    from mrc._dp import ffi

    engine = {name for name, _ in ffi.typeof("struct mrc_cc_params").fields} - {"algorithm"}
    assert set(pr.NSCC_FIELDS) == engine  # a field the engine gains is one a profile can set


def test_registry_binds_qps_to_online_profiles_and_an_ev_profile_in_use_is_ebusy():
    reg = pr.Registry()
    with pytest.raises(ErrnoError, match="no CC profile 3") as e:
        reg.acquire("cc", 3)
    assert code(e) == errno.ENOENT
    cc = reg.add(CCProfile(3, "uet-1.0-nscc", {"max_cwnd": 300_000}))
    with pytest.raises(ErrnoError, match="bring it ONLINE") as e:
        reg.acquire("cc", 3)  # OFFLINE: not usable by a QP yet
    assert code(e) == errno.EINVAL
    cc.online()
    assert reg.acquire("cc", 3) is cc and cc.users == 1
    for call in (cc.offline, lambda: cc.modify("uet-1.0-nscc", {}), cc.reset):
        with pytest.raises(ErrnoError) as e:
            call()
        assert code(e) == errno.EBUSY
    # a configured id cannot be taken over by a new profile
    with pytest.raises(ErrnoError, match="reset") as e:
        reg.add(CCProfile(3, "uet-1.0-nscc", {}))
    assert code(e) == errno.EBUSY
    reg.release(cc)
    cc.offline()
    cc.reset()
    assert reg.add(CCProfile(3, "uet-1.0-nscc", {})).state == OFFLINE

    # an EV profile in use by a QP: OFFLINE is EBUSY; denials reach the QP through watchers
    t = Topology(planes=2, spines=2, leaves=2, hosts=2)
    prof = reg.add(srv6_from_fabric(t, 0, 1, pid=7))
    prof.fmt.online()
    prof.online()
    assert reg.acquire("ev", 7) is prof
    with pytest.raises(ErrnoError) as e:
        prof.offline()
    assert code(e) == errno.EBUSY
    seen = []
    prof.watchers.append(lambda addr, state: seen.append((addr, state)))
    value = prof.entries[1].value
    prof.set_ev_state(value, DENIED)
    prof.set_ev_state(value, DENIED)  # no change: no second call
    prof.set_ev_state(value, GOOD)
    addr = pr.srv6_address(value, prof.fmt.width)
    assert addr == t.path_address(0, 1, 0, 1)
    assert seen == [(addr, DENIED), (addr, GOOD)]
    reg.release(prof)
    prof.offline()


def test_registry_limits_are_e2big():
    reg = pr.Registry()
    for i in range(pr.LIMITS.max_fmt_profiles):
        reg.add(EVFormatProfile(i, UDP, [16]))
    with pytest.raises(ErrnoError) as e:
        reg.add(EVFormatProfile(99, UDP, [16]))
    assert code(e) == errno.E2BIG
    # a reset profile's id can be configured anew: no new slot is needed
    reg.get("fmt", 0).reset()
    assert reg.add(EVFormatProfile(0, STEV, [20])).mode == STEV
