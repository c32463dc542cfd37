"""The source formats of instance records, one module each: each maps one raw record to a validated
`Instance` or raises `fields.BadField` naming the field and the fix. `swe_rlvr.loaders` reads the
files and picks the format by name; `fields` holds the checks every format shares."""
