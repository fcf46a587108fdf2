"""The command line (`diagnose`): argument parsing, safe output, exit codes and signals. `main.main` is the
entry point; the library API is `nsys_diagnose.api`."""
