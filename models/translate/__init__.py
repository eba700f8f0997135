"""The toy-translation application that `python -m models` runs: data, tasks, training,
the run directory, evaluation, plots and the command line.

It is built on the architectures in `models/` and is kept apart from them: nothing in
`models/` imports this package.
"""
