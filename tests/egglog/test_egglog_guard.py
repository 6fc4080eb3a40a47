"""The one guard around every egglog call (eqsat.egglog.egraph.egglog_guard): real egglog errors and Rust panics
become EgglogError saying what was being done; KeyboardInterrupt and SystemExit are never turned into one."""

from __future__ import annotations

import signal
import time

import pytest

from eqsat import ir
from eqsat.egglog.egraph import EGraph, egglog_guard
from eqsat.errors import EgglogError, EGraphError, EqsatError, InputError


@pytest.fixture
def egraph() -> EGraph:
    x = ir.input_("x", (2, 3))
    return EGraph.from_graph(ir.Graph((x,), (ir.make("relu", [x]),), ("y",)))


def test_malformed_program_becomes_a_typed_error_and_the_egraph_stays_usable(egraph):
    with pytest.raises(EgglogError, match=r"while parsing '\(run-schedule \(saturate'.*parse error") as info:
        egraph.run_program("(run-schedule (saturate")
    assert isinstance(info.value, EqsatError) and info.value.exit_code == 1
    assert egraph.size().enodes == 2


def test_rust_panic_becomes_a_typed_error(egraph):
    """Running an undeclared ruleset panics inside egglog (pyo3_runtime.PanicException, not an Exception)."""
    with pytest.raises(EgglogError, match=r"while running '\(run-schedule \(saturate \(run nope\)\)\)'.*Panic") as info:
        egraph.run_program("(run-schedule (saturate (run nope)))")
    cause = info.value.__cause__
    assert type(cause).__name__ == "PanicException" and not isinstance(cause, Exception)


def test_egglog_pop_without_push_is_a_typed_error(egraph):
    with pytest.raises(EgglogError, match="pop too much"):
        egraph.run_program("(pop)")
    with pytest.raises(EGraphError, match="pop without a matching push"):  # the wrapper's own check
        egraph.pop()
    egraph.push()
    egraph.pop()
    assert egraph.depth == 0


@pytest.mark.parametrize("exc", [KeyboardInterrupt("stop"), SystemExit(3), InputError("kept as is")])
def test_interrupts_exits_and_our_errors_pass_through_unchanged(egraph, exc):
    with pytest.raises(type(exc)) as info:
        with egglog_guard("checking the guard"):
            egraph.size()  # a real egglog call inside the guarded block
            raise exc
    assert info.value is exc


def test_ctrl_c_during_egglog_calls_propagates_as_keyboard_interrupt(egraph):
    """A SIGINT-like interrupt (raised by a signal handler) lands inside or between guarded egglog calls."""
    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(KeyboardInterrupt):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                egraph.push()
                egraph.run_program('(set (node "tmp") (Relu (node "n1")))')
                egraph.saturate_analysis()
                egraph.pop()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
