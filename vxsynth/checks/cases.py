"""The input cases every check runs (`kernels.tensors.make_inputs` draws each), kept free of heavy imports so that
commands can validate a configured list before torch loads."""

CASES = ("near_zero", "large", "shifted", "rescaled", "path_bits", "normal")  # normal last: the checked launch keeps its inputs
