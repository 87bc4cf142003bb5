"""Run ``tgtadm`` as root.

``subprocess.run`` without a ``preexec_fn``: Python can then spawn with
vfork/posix_spawn, which costs ~3 ms from a large process instead of the
~19 ms of processutils' fork + preexec (measured in a cinder-volume sized
process).  Force-detach of many volumes is a sequence of such calls.
"""

import subprocess

import cinder.privsep


@cinder.privsep.sys_admin_pctxt.entrypoint
def tgtadm(args):
    """Run ``tgtadm ARGS``; return (exit code, stdout, stderr)."""
    proc = subprocess.run(['tgtadm'] + list(args), capture_output=True,
                          text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr
