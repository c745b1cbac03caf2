"""What `mrc fabric status` says about what runs the fabric's SRv6 (mrc.fabric.status), from the
fabric's state alone: no namespaces needed."""
from mrc.fabric.status import status_text
from mrc.fabric.topology import Topology


def text(srv6=None):
    t = Topology(planes=2, spines=2, leaves=2, hosts=2, name="st1")
    state = {"faults": {}} | ({} if srv6 is None else {"srv6": srv6})
    obj, out = status_text(t, state, [t.ns(n) for n in t.nodes()])
    return obj, out.splitlines()[1]


def test_the_kernel_or_the_tc_programs_are_named_and_a_state_without_the_key_is_the_kernel():
    assert text("kernel")[1].startswith("SRv6: the kernel's") and text()[0]["srv6"] == "kernel"
    assert text()[1] == text("kernel")[1]
    assert text("tc-bpf")[1].startswith("SRv6: tc-BPF programs")


def test_a_value_the_state_should_not_hold_is_said_as_it_is_with_what_to_do():
    obj, line = text("ebpf?")
    assert obj["srv6"] == "ebpf?"
    assert "'ebpf?'" in line and "neither 'kernel' nor 'tc-bpf'" in line and "mrc fabric down" in line


def test_a_state_whose_srv6_is_not_a_string_or_is_long_gets_the_same_line_cut_short():
    for hostile in (["kernel"], {"a": 1}, 7, "x" * 10_000):
        obj, line = text(hostile)
        assert "neither 'kernel' nor 'tc-bpf'" in line and len(line) < 200, (hostile, line)
