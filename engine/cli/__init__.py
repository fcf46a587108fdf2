"""The command line (`diagnose`): argument parsing, safe output, exit codes and signals. `console.run` is the
console script's entry point (it installs the stop-signal handlers before the rest is imported) and `main.main`
the command itself, which dispatches to a module per command (its parser beside its handler); the library API is
`nsys_diagnose.runs.api`."""
