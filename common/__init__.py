"""Code shared by the master, the workers and the client."""
