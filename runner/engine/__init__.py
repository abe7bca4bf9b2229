"""The one imperative shell: the driver feeds events to the pure core and carries its commands out
on the backends, each attempt through `attempt`; `run_command` and `pipeline_run` are `run`'s
engine and `console` what it shows a person. The face imports nothing, so a caller that needs one
part loads only that part."""
