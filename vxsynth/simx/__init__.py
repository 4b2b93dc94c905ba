"""SimX target: detect a Vortex installation, build and run candidates on the simulator, parse its counters, and
run target-configuration experiments."""
