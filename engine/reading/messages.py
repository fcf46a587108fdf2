"""The progress messages the command line prints once, as lasting lines, where a stage is only shown on a terminal
and then erased: a cache that cannot be used, a note about the profiles given."""


class CacheWarning(str):
    """A progress message saying that the cache cannot be used and what to do about it. It goes through the same
    progress callback as the stages (a plain string to any caller that only collects them), but the command line
    prints it once as a lasting warning line, on a terminal or not, where a stage is only shown on a terminal and
    then erased (docs/performance.md)."""


class Note(str):
    """A progress message the user should read but that is no warning: a trace left out of a multi-rank run, the
    rank of a run one trace is (engine/reading/ranks.py). Like a CacheWarning, the command line prints it once, as
    a lasting `note:` line on standard error (a plain string to any caller that only collects the stages)."""
