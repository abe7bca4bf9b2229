"""`runs-on` a rented Clore GPU: one ephemeral (just-in-time) GitHub Actions runner per job.

```
start  (a GitHub-hosted job)          the user's job            stop (a GitHub-hosted job)
  rent a server (ledger first)  ->  runs-on: <label>  ->  deregister the runner if it never ran,
  register a JIT runner               one job, then the      cancel the order (proven ours by the
  install + start it over SSH         runner exits           record), report what it cost
  output the label and the record
```

Modules, one job each:
- `errors`: what a person reads when GitHub or the record says no;
- `github`: the runners REST API (generate-jitconfig, get, delete, list) and its errors in words;
- `record`: the rental record carried from start to stop and to the reaper (no credential in it);
- `remote`: the on-server install: a script and the JIT config sent as files, never a command line;
- `start`, `stop`: the two halves; `release`: prove an order is ours, cancel it, say what it cost;
- `reap`: the cron reaper's records (GitHub artifacts) and its cancels past the cap;
- `report`: the Markdown of what the runners cost, for the step summary and the PR comment.
"""
