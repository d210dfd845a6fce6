"""Published measurements shipped with solveplan (package data, installed as
solveplan.catalog_published): byte-for-byte copies of the project's read-only data set, so that
`solveplan validate` and the tests run from a clean clone or an installed wheel. Provenance and
checksums: README.md beside this file; every row names its own source inside the files."""
