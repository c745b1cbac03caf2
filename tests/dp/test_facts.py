"""Facts kept once, in C, and asked for by Python: a QP's EV total, the
congestion controls by name, opcode and NACK names, and a QP's security
mode (the keys it holds)."""
from __future__ import annotations

import errno

import pytest
from mrc._dp import ffi, lib

from mrc import simspec, wire
from mrc.errors import ErrnoError
from mrc.manual import ManualContext
from tests.dp.harness import Pair, attr


def test_the_ev_total_comes_from_c_and_sizes_the_qps_ev_table():
    qa = attr(planes=2, ev_count=8, ev_backup=3, ev_min_active=2)
    a = qa.to_c()
    assert lib.mrc_qp_ev_total(a) == 8 + 3 * 2
    with ManualContext(planes=2) as ctx:
        qp = ctx.create_qp(qa)
        assert len(qp.evs()) == lib.mrc_qp_ev_total(a)


def test_the_congestion_controls_are_named_by_c_and_an_unknown_one_is_refused():
    assert simspec.CC_ALGORITHMS == {"nscc": lib.MRC_CC_NSCC, "fixed": lib.MRC_CC_FIXED}
    assert lib.mrc_cc_algorithm_name(lib.MRC_CC_NALGORITHMS) == ffi.NULL
    with ManualContext(planes=1) as ctx:
        ctx.create_qp(attr(planes=1, cc={"algorithm": lib.MRC_CC_FIXED}))
        with pytest.raises(ErrnoError) as e:
            ctx.create_qp(attr(planes=1, cc={"algorithm": lib.MRC_CC_NALGORITHMS}))
        assert e.value.errno == errno.EINVAL


def test_opcode_and_nack_names_are_cs_table():
    for op, name in wire.OPCODE_NAMES.items():
        assert ffi.string(lib.mrc_opcode_name(op)).decode() == name == \
            next(k[3:] for k, v in wire.CONSTANTS.items() if k.startswith("OP_") and v == op)
    assert wire.NACK_REASONS[wire.NACK_TRIMMED] == "TRIMMED" and len(wire.NACK_REASONS) >= 8


@pytest.mark.parametrize("mode", ["off", "auth", "encrypt"])
def test_a_qps_security_mode_is_what_its_keys_say(mode):
    pair = Pair(seed=3)
    pair.qa, pair.qb = pair.sim.connect(pair.a, pair.b, attr(), security=mode)
    assert pair.qa.security == pair.qb.security == mode


def test_the_security_of_a_qp_that_does_not_exist_is_enoent():
    with ManualContext(planes=1) as ctx:
        qp = ctx.create_qp(attr(planes=1))
        assert lib.mrc_qp_security(ctx.handle(), qp.qpn) == lib.MRC_SEC_OFF
        assert lib.mrc_qp_security(ctx.handle(), qp.qpn ^ 1) == -errno.ENOENT
