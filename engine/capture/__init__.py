"""`diagnose profile -- CMD`: capture a run with nsys the way its stack needs, export it and diagnose it.

    presets.py   the capture presets (rules/capture/presets/*.yaml) and the guess of the stack from the command
    nsys.py      finding nsys, what the installed version accepts (`--version`, `profile --help`), cached
    flags.py     the nsys command lines for a preset, in the spellings the installed nsys accepts
    run.py       running the capture (signals, exit status), importing a left-over .qdstrm, exporting SQLite
"""
