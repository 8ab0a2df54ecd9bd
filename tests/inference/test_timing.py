"""Timing candidates on a busy machine."""






def test_the_fastest_call_survives_a_burst_on_a_busy_machine(monkeypatch):
    """Measured choices (layouts, int8 kernels) time candidates in interleaved rounds and keep each
    one's shortest call: another program's burst during one call of the fastest candidate does not
    hand the choice to a slower one (a clock the test drives; no real timing)."""
    import transduce.inference.timing as fast

    clock = [0.0]
    monkeypatch.setattr(fast.time, "perf_counter", lambda: clock[0])
    # quick's 1st timed call: a burst
    costs = {"quick": [1.0, 50.0, 1.0, 1.0, 1.0, 1.0], "steady": [2.0] * 6}

    def call(name):
        def run():
            clock[0] += costs[name].pop(0) if costs[name] else 0.0
        return run

    assert fast.fastest_call({"quick": call("quick"), "steady": call("steady")}) == "quick"
