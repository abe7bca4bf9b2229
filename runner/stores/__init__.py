"""Where clore-run keeps what must outlive a process, one package a store:

- ledger/  the rental ledger (every rental, written before the call that can cost money)
- queue/   `serve`'s submissions, jobs and attempts
- hosts/   the host history (what each marketplace host did when it was rented)
- pools/   budget pools shared by runs and `serve` instances: PostgreSQL only (a pool is for
           many machines; one machine's budget is the run's own)

Each store package has the same shape: `__init__.py` is what callers import (the interface and
`open_*`, which picks the half a target names: a path, or a `postgresql://` URL), `rows.py` the
rows and rules written once for both halves, `sqlite.py` the SQLite half (the default) and
`postgres.py` the PostgreSQL half, which loads psycopg only when a URL asks for it. Beside them:
sqlite.py and pg.py, how each database is opened and talked to; sql.py, the statement runner
both halves of a row store share; target.py, what `--ledger`, `--db` and `--coordinator` name.

Stores import neither runner.serve nor runner.backends: what a marketplace does with a row
(reconcile, reap, bill) is the backend's.
"""
