"""``cinder-forcedetach fence list|lift``: the fences force-detach left.

Usage::

    cinder-forcedetach fence list [--volume ID] [--backend NAME]
        [--config-file FILE]... [--config-dir DIR] [--format table|json]
    cinder-forcedetach fence lift (--volume ID | --address ADDR)
        [--backend NAME] [--config-file FILE]... [--config-dir DIR]

A driver that fences stale clients (the RBD driver blocklists their
addresses) records each fence.  These commands run on a volume host, like
``attachment refresh``: they read cinder.conf, build the driver of the
volume's backend (``--volume``), of ``--backend``, or of the only enabled
backend, and call its ``list_fences`` / ``lift_fence``.

``list`` prints each fence: client address, volume, hosts, when it was
fenced, when the blocklist entry expires, whether it is still active.
``lift`` removes the blocklist entries and records of a volume or of one
address and prints the lifted addresses; nothing left to lift is a
success.  A fenced client instance stays dead after a lift: lifting only
lets a new client from that address in before the entry expires.

Exit codes: 0 success, 1 usage error or a backend that does not fence,
2 volume or backend not found, 4 backend error (cluster unreachable, no
permission to lift).
"""

import argparse
import sys

from cinder_forcedetach.cmd import local

HELP = ('List or lift the fences force-detach left on a backend (runs '
        'locally on a volume host, reads cinder.conf).')
LIST_COLUMNS = ('addr', 'volume_id', 'hosts', 'fenced_at', 'expires_at',
                'active')


def add_arguments(actions, with_format=True):
    """``list`` and ``lift`` actions on the *actions* subparsers.

    Returns the two parsers; *with_format* as for
    :func:`local.add_config_arguments`.
    """
    list_p = actions.add_parser('list', help='list recorded fences',
                                description=HELP)
    list_p.add_argument('--volume', metavar='VOLUME_ID',
                        help='only the fences of this volume')
    lift_p = actions.add_parser('lift', help='lift fences of a volume or '
                                'of one client address', description=HELP)
    which = lift_p.add_mutually_exclusive_group(required=True)
    which.add_argument('--volume', metavar='VOLUME_ID',
                       help='lift every fence of this volume')
    which.add_argument('--address', metavar='ADDR',
                       help='lift the fence of this client address '
                            '(IP:PORT/NONCE as listed)')
    for parser, action in ((list_p, 'list'), (lift_p, 'lift')):
        parser.add_argument('--backend', metavar='NAME',
                            help='backend (cinder.conf section) to use '
                                 'when no --volume names it')
        local.add_config_arguments(parser, with_format)
        parser.set_defaults(fence_action=action)
    return list_p, lift_p


def build_parser():
    parser = argparse.ArgumentParser(prog='cinder-forcedetach fence',
                                     description=HELP)
    actions = parser.add_subparsers(dest='action', metavar='ACTION')
    actions.required = True
    add_arguments(actions)
    return parser


def _driver(ctxt, args):
    """(driver, volume or None) for the command's backend."""
    from cinder import exception
    from cinder import objects

    volume = None
    if args.volume:
        try:
            volume = objects.Volume.get_by_id(ctxt, args.volume)
        except exception.VolumeNotFound:
            raise local.CliError(local.EXIT_NOT_FOUND,
                                 'volume %s not found' % args.volume)
    if volume is not None and volume.host:
        group, backend_host = local.backend_of(volume)
        if args.backend and args.backend != group:
            raise local.CliError(
                local.EXIT_USAGE, 'volume %s is on backend %s, not %s' % (
                    volume.id, group, args.backend))
    else:
        group, backend_host = local.named_backend(args.backend)
    driver = local.build_driver(ctxt, group, backend_host)
    if not hasattr(driver, 'list_fences'):
        raise local.CliError(
            local.EXIT_USAGE, 'the driver of backend %s (%s) does not fence '
            'clients' % (group, type(driver).__name__))
    return driver, volume


def _fence(args, stdout):
    from cinder import context

    # Fences outlive their volume: a deleted volume still names them.
    ctxt = context.get_admin_context(read_deleted='yes')
    driver, volume = _driver(ctxt, args)
    if args.fence_action == 'list':
        fences = driver.list_fences(volume)
        local.emit_list([local.mask_secrets(f) for f in fences],
                        LIST_COLUMNS, args.format, stdout)
    else:
        lifted = driver.lift_fence(volume if volume is not None
                                   else args.address)
        local.emit({'lifted': lifted}, args.format, stdout)
    return local.EXIT_OK


def run(args, stdout=None, stderr=None):
    """Run the command for parsed *args*; returns the exit code."""
    args.what = 'fence %s' % args.fence_action
    return local.run(_fence, args, stdout or sys.stdout,
                     stderr or sys.stderr)


def main_fence(argv=None, stdout=None, stderr=None):
    """Entry point: ``cinder-forcedetach fence ARGS``."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return local.EXIT_USAGE if exc.code else local.EXIT_OK
    return run(args, stdout, stderr)


if __name__ == '__main__':
    sys.exit(main_fence(sys.argv[1:]))
