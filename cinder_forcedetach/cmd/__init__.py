"""Command-line tools of cinder-forcedetach."""
