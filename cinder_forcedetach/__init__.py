"""Cinder volume drivers whose force-detach really tears down the backend."""
