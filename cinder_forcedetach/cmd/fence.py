#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

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

from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.cmd.errors import EXIT_NOT_FOUND
from cinder_forcedetach.cmd.errors import EXIT_OK
from cinder_forcedetach.cmd.errors import EXIT_USAGE
from cinder_forcedetach.cmd import local
from cinder_forcedetach.cmd import output
from cinder_forcedetach.cmd import registry
from cinder_forcedetach.cmd.registry import arg

HELP = ('List or lift the fences force-detach left on a backend (runs '
        'locally on a volume host, reads cinder.conf).')
LIST_COLUMNS = ('addr', 'volume_id', 'hosts', 'fenced_at', 'expires_at',
                'active')
BACKEND = arg('--backend', metavar='NAME',
              help='backend (cinder.conf section) to use when no --volume '
                   'names it')

registry.category('fence', HELP)


def _driver(ctxt, args):
    """(driver, volume or None) for the command's backend."""
    from cinder import exception
    from cinder import objects

    volume = None
    if args.volume:
        try:
            volume = objects.Volume.get_by_id(ctxt, args.volume)
        except exception.VolumeNotFound:
            raise CliError(EXIT_NOT_FOUND,
                           'volume %s not found' % args.volume)
    if volume is not None and volume.host:
        group, backend_host = local.backend_of(volume)
        if args.backend and args.backend != group:
            raise CliError(EXIT_USAGE, 'volume %s is on backend %s, not %s'
                           % (volume.id, group, args.backend))
    else:
        group, backend_host = local.named_backend(args.backend)
    # Fences are read and lifted through the driver's Ceph layer, which
    # needs no setup and waits for the cluster in bounded time.
    driver = local.build_driver(ctxt, group, backend_host, setup=False)
    if not hasattr(driver, 'list_fences'):
        raise CliError(EXIT_USAGE, 'the driver of backend %s (%s) does not '
                       'fence clients' % (group, type(driver).__name__))
    return driver, volume


def _context():
    from cinder import context

    # Fences outlive their volume: a deleted volume still names them.
    return context.get_admin_context(read_deleted='yes')


@registry.command(
    'fence', 'list', 'list recorded fences', description=HELP, local=True,
    arguments=[arg('--volume', metavar='VOLUME_ID',
                   help='only the fences of this volume'),
               BACKEND])
def fence_list(conf, args, out):
    """Print the fences of a volume or of a backend, secrets masked."""
    driver, volume = _driver(_context(), args)
    out.emit_list([output.mask_secrets(f) for f in
                   driver.list_fences(volume)], LIST_COLUMNS)
    return EXIT_OK


@registry.command(
    'fence', 'lift', 'lift fences of a volume or of one client address',
    description=HELP, local=True,
    arguments=[registry.exclusive(
        arg('--volume', metavar='VOLUME_ID',
            help='lift every fence of this volume'),
        arg('--address', metavar='ADDR',
            help='lift the fence of this client address (IP:PORT/NONCE as '
                 'listed)'),
        required=True), BACKEND])
def fence_lift(conf, args, out):
    """Lift the fences of a volume or of one address; print what went."""
    driver, volume = _driver(_context(), args)
    lifted = driver.lift_fence(volume if volume is not None
                               else args.address)
    out.emit({'lifted': lifted})
    return EXIT_OK
