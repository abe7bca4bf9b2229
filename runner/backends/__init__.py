"""Where jobs run: local processes, SSH hosts, rented Clore servers."""
