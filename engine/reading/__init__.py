"""Reading an Nsight Systems export into the canonical tables every later stage reads.

    export.py           open_export / empty_export / Export: the glue of the modules below
    inputs.py           input checks, .nsys-rep conversion, messages for files that cannot be read
    profile_file.py     the profile as it is read: one file descriptor, its fingerprint
    loader.py           fills the canonical tables from the attached export, running the adapters
    adapters.py         per-nsys-version SQL, one adapter per canonical table and raw table
    adapter_base.py     what the adapters are built from: Source, Adapter, shared SQL fragments
    string_ids.py       the StringIds scratch table and the kernel and API names the stored tables join back
    metadata.py         what the export says about itself (ProfileInfo, the profile_info table)
    canonical.py        the canonical tables: definitions of the views and stored tables
    canonical_fill.py   the by-name fill, checking each adapter query against its table
    canonical_doc.py    the generated reference of the canonical tables (python -m ...reading.canonical_doc)
    cache.py            the private cache of canonical tables: its directory, its key, what is trusted
    cache_format.py     the format of a cache: its digest, the check of its catalog, its saved state
    workspace.py        scratch space, DuckDB connections and the memory limit
    leftovers.py        removal of what killed runs left behind
    messages.py         the lasting progress messages: CacheWarning, Note
    ranks.py            which exports make up a multi-rank run
    rank_identity.py    what each profile records about its capture; whether the profiles are one run
    trace_head.py       what a PyTorch-profiler trace says about itself without being parsed whole
    kineto*.py          reading PyTorch-profiler (Kineto) traces into the same canonical tables

engine/reading/nsys-schema.md documents what this package relies on about the nsys schema.
"""
