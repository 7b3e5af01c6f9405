"""The contract suite: the behaviour of every public operation of ``corral.Cluster``,
written once and run over SQLite, PostgreSQL and HTTP (the ``cluster`` fixture of
``tests/conftest.py``).

Each module declares, at module level, the operations it covers: ``OPERATIONS``
(a behaviour test) and ``BAD_INPUT`` (a refusal test: the error class, the field,
and nothing changed). ``test_coverage.py`` fails when an operation of ``Cluster`` has
no entry in either union.
"""
