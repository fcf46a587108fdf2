"""Reading an Nsight Systems export into the canonical tables every later stage reads.

    export.py        open_export / empty_export / Export: the glue of the modules below
    inputs.py        input checks, .nsys-rep conversion, messages for files that cannot be read
    profile_file.py  the profile as it is read: one file descriptor, its fingerprint
    loader.py        fills the canonical tables from the attached export, running the adapters
    adapters.py      per-nsys-version SQL, one adapter per canonical table and raw table
    metadata.py      what the export says about itself (ProfileInfo, the profile_info table)
    canonical.py     the canonical tables: definitions, the by-name fill check, the generated reference
    cache.py         the private cache of canonical tables, scratch space and DuckDB settings
    ranks.py         which exports make up a multi-rank run

engine/reading/nsys-schema.md documents what this package relies on about the nsys schema.
"""
