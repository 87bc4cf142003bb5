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

"""What the commands that run on a volume host share.

``attachment refresh`` and ``fence list|lift`` do not go through Cinder's
API: like ``cinder-manage`` they read cinder.conf, open Cinder's database
and build the volume driver of a backend.  This module declares their
configuration options, loads the configuration, finds and builds that
driver, and runs a command (:func:`run`) mapping Cinder's errors to exit
codes.
"""

import logging as std_logging

from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.cmd.errors import EXIT_BACKEND
from cinder_forcedetach.cmd.errors import EXIT_NOT_FOUND
from cinder_forcedetach.cmd.errors import EXIT_USAGE
from cinder_forcedetach.cmd.registry import arg

DEFAULT_CONFIG = '/etc/cinder/cinder.conf'

# The options every local command has, after its own.
CONFIG_ARGUMENTS = [
    arg('--config-file', action='append', default=None, metavar='FILE',
        help='cinder configuration file (repeatable; default %s)' %
             DEFAULT_CONFIG),
    arg('--config-dir', metavar='DIR', default=None,
        help='directory of further *.conf files'),
    arg('--debug', action='store_true',
        help='log debug messages on stderr'),
]


def load_config(args):
    """Cinder's configuration from *args*; logging on stderr only."""
    from oslo_config import cfg
    from oslo_log import log as logging

    from cinder.common import config  # noqa: F401  (registers options)
    from cinder import objects
    from cinder import version

    conf = cfg.CONF
    logging.register_options(conf)
    try:
        conf(args=[], project='cinder', version=version.version_string(),
             default_config_files=args.config_file or [DEFAULT_CONFIG],
             default_config_dirs=[args.config_dir] if args.config_dir
             else [])
    except cfg.Error as err:
        raise CliError(EXIT_USAGE,
                       'cannot load the configuration: %s' % err)
    conf.set_override('use_stderr', True)
    conf.set_override('log_file', None)
    conf.set_override('log_dir', None)
    conf.set_override('debug', args.debug)
    logging.setup(conf, 'cinder-forcedetach')
    if not args.debug:
        std_logging.getLogger().setLevel(std_logging.WARNING)
    objects.register_all()
    return conf


def backend_of(volume):
    """(config group, ``host@backend``) of the backend holding *volume*."""
    from cinder.volume import configuration
    from cinder.volume import volume_utils

    backend_host = volume_utils.extract_host(volume.host, 'backend')
    group = (backend_host.split('@', 1)[1] if '@' in backend_host
             else configuration.SHARED_CONF_GROUP)
    return group, backend_host


def enabled_backends(conf):
    """The backend sections cinder.conf's ``enabled_backends`` names."""
    return [b.strip() for b in (conf.enabled_backends or []) if b.strip()]


def backends(names=None):
    """``[(config group, host@backend)]`` of *names*, else every enabled.

    Without ``enabled_backends``: ``[backend_defaults]`` alone.
    """
    from oslo_config import cfg

    return [named_backend(name)
            for name in names or enabled_backends(cfg.CONF) or [None]]


def named_backend(name=None):
    """(config group, ``host@backend``) of backend *name*.

    Without a name: the only enabled backend, or ``[backend_defaults]``
    when cinder.conf enables none.
    """
    from oslo_config import cfg

    from cinder.volume import configuration

    conf = cfg.CONF
    enabled = enabled_backends(conf)
    if name is None:
        if len(enabled) > 1:
            raise CliError(EXIT_USAGE, 'cinder.conf enables several '
                           'backends (%s): name one with --backend' %
                           ', '.join(enabled))
        name = enabled[0] if enabled else None
    elif name not in enabled:
        raise CliError(EXIT_NOT_FOUND, 'backend %s is not enabled in '
                       'cinder.conf (enabled_backends: %s)' % (
                           name, ', '.join(enabled) or 'none'))
    if name is None:
        return configuration.SHARED_CONF_GROUP, conf.host
    return name, '%s@%s' % (conf.host, name)


def build_driver(ctxt, group, backend_host, cluster_name=None, setup=True):
    """The volume driver of config *group*, set up unless *setup* is False."""
    from oslo_utils import importutils

    from cinder.db import api as db
    from cinder.volume import configuration
    from cinder.volume import manager

    config = configuration.Configuration(manager.volume_backend_opts,
                                         config_group=group)
    driver = importutils.import_object(
        config.volume_driver, configuration=config, db=db,
        host=backend_host, cluster_name=cluster_name,
        is_vol_db_empty=False, active_backend_id=None)
    if setup:
        driver.do_setup(ctxt)
    return driver


def command_driver(ctxt, group, backend_host, cluster_name=None):
    """The driver of *group* for a command, set up if it says it needs it.

    A driver whose ``commands_need_setup`` is False works without
    ``do_setup`` (the RBD driver: its Ceph layer waits for the cluster in
    bounded time, upstream's setup would not).
    """
    driver = build_driver(ctxt, group, backend_host, cluster_name,
                          setup=False)
    if getattr(driver, 'commands_need_setup', True):
        driver.do_setup(ctxt)
    return driver


def run(command, args, out, stderr):
    """Load the configuration, run *command* (a registry Command).

    Its function gets ``(conf, args, out)`` and returns the exit code or
    raises :class:`CliError`; Cinder's ``NotFound`` maps to 2, its
    invalid-input errors to 1, anything else to 4 (a backend error).
    """
    def fail(code, message):
        stderr.write('cinder-forcedetach: error: %s\n' % message)
        return code

    try:
        conf = load_config(args)
    except CliError as err:
        return fail(err.code, err.message)

    from cinder import coordination
    from cinder import exception

    coordination.COORDINATOR.start()
    try:
        return command.func(conf, args, out)
    except CliError as err:
        return fail(err.code, err.message)
    except (exception.InvalidInput, exception.InvalidVolume,
            exception.InvalidConnectorException) as err:
        return fail(EXIT_USAGE, str(err))
    except exception.NotFound as err:
        return fail(EXIT_NOT_FOUND, str(err))
    except Exception as err:
        return fail(EXIT_BACKEND, '%s failed: %s' % (
            command.what.format(**vars(args)), err))
    finally:
        coordination.COORDINATOR.stop()


#: cinder-volume's own option (``cinder.cmd.volume``, which a command does
#: not import): the volume services' cluster, read from the same file.
CLUSTER_OPT_HELP = ('Name of the cluster of the volume services '
                    '(cinder-volume\'s [DEFAULT] cluster).')


def cluster_of(conf):
    """The volume services' cluster (``[DEFAULT] cluster``), or None."""
    from oslo_config import cfg

    try:
        conf.register_opt(cfg.StrOpt('cluster', help=CLUSTER_OPT_HELP))
    except cfg.DuplicateOptError:
        pass        # registered by cinder-volume's module: the same option
    return conf.cluster
