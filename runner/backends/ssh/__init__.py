"""Jobs over SSH: connections, remote execution, tar streams and the bring-your-own-host backend.

Nothing is imported here so that `import runner.backends.ssh.keys` does not pull paramiko's
whole client in for a module that only needs keys.
"""
