"""Where clore-run keeps what must outlive a process: the rental ledger, the queue and the
budget pools, each behind one interface with a SQLite file (the default, one machine) and a
PostgreSQL database (shared by many machines) behind it."""
