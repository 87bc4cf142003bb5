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

"""Cinder's API, scheduler and volume service in-process, on a vendor driver.

Built on Cinder's own functional harness
(``cinder.tests.functional.functional_helpers._FunctionalTestBase``, which
ships in the ``cinder`` wheel): the WSGI API, the scheduler and one volume
service run in this process over oslo.messaging's ``fake:/`` transport,
with a SQLite database file and real tooz file locks.  The volume service
loads the :class:`Target`'s driver with the target's backend options, set
in Cinder's ``[backend_defaults]`` group, which is where a volume service
without ``enabled_backends`` reads its driver's configuration.

A :class:`Target` comes from a ``cinder.conf`` section
(:meth:`Target.from_config`) or from a dict (our CI).
"""

import configparser
import contextlib
import hashlib
import os
import sqlite3
import sys
import tempfile
import time

from cinder import context
from cinder.db import migration
from cinder import objects
import cinder.privsep
from cinder.tests.functional import functional_helpers
from cinder.tests.unit import test as cinder_test
from cinder.volume import configuration
import fixtures
from oslo_config import cfg
import sqlalchemy

from cinder_forcedetach.conformance import probe as probe_mod
from cinder_forcedetach.conformance import sqlite_locking
from cinder_forcedetach import mixin

CONF = cfg.CONF
BACKEND = configuration.SHARED_CONF_GROUP
PROTOCOLS = ('iscsi', 'fc', 'rbd')
CAPABILITIES = ('multiattach', 'fencing') + PROTOCOLS
# Options of a backend section the harness sets itself or that make no
# sense in one in-process volume service.
SKIPPED_OPTIONS = ('volume_driver', 'enabled_backends', 'backend_host')
# RBD tells hosts apart by the address their clients use: each host of the
# kit gets its own loopback address (a probe binds its clients to it).
RBD_HOST_IPS = {'conformance-host1': '127.0.0.11',
                'conformance-host2': '127.0.0.12'}
_PROTOCOL_NAMES = {'iscsi': 'iscsi', 'fc': 'fc', 'fibre_channel': 'fc',
                   'rbd': 'rbd', 'ceph': 'rbd'}


def normalize_protocol(value):
    """'iSCSI', 'FC', 'ceph', ... -> 'iscsi', 'fc', 'rbd' (or None)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if not value:
        return None
    return _PROTOCOL_NAMES.get(str(value).lower().replace(' ', '_'))


def parse_capabilities(value):
    """'multiattach,fencing,fc' / a set / a dict -> a capability dict.

    Keys: ``multiattach`` and ``fencing`` (bool), ``protocol``
    ('iscsi', 'fc' or 'rbd').  A name prefixed with ``no-`` declares the
    capability absent; ``protocol=fc`` is accepted as well as ``fc``.
    """
    if value is None:
        return {}
    if isinstance(value, dict):
        caps = dict(value)
        if 'protocol' in caps:
            caps['protocol'] = normalize_protocol(caps['protocol'])
        return caps
    if isinstance(value, str):
        value = [v for v in value.replace(' ', '').split(',') if v]
    caps = {}
    for name in value:
        name = name.lower()
        if name.startswith('protocol='):
            name = name.split('=', 1)[1]
        absent = name.startswith('no-')
        name = name[3:] if absent else name
        if normalize_protocol(name):
            caps['protocol'] = normalize_protocol(name)
        elif name in ('multiattach', 'fencing'):
            caps[name] = not absent
        else:
            raise ValueError('unknown capability %r (known: %s)' % (
                name, ', '.join(CAPABILITIES)))
    return caps


def default_connector(host, protocol):
    """The connector os-brick would build on *host* for *protocol*.

    RBD's names the host's own loopback address (:data:`RBD_HOST_IPS`).
    """
    digest = hashlib.sha256(host.encode()).hexdigest()
    connector = {'host': host, 'ip': '127.0.0.1', 'platform': 'x86_64',
                 'os_type': 'linux', 'multipath': False}
    if protocol == 'iscsi':
        connector['initiator'] = (
            'iqn.2026-11.org.cinder-forcedetach.conformance:%s' % host)
    elif protocol == 'fc':
        connector['wwpns'] = ['2100%s%d' % (digest[:11], i)
                              for i in range(2)]
        connector['wwnns'] = ['2000%s%d' % (digest[:11], i)
                              for i in range(2)]
    elif protocol == 'rbd':
        connector['ip'] = RBD_HOST_IPS.get(host, '127.0.0.1')
        connector['do_local_attach'] = False
    return connector


class Target(object):
    """What the kit runs against: a driver, its options, its probe.

    :param driver: the driver class or its ``module.Class`` path.
    :param options: backend options (name -> value; strings are converted
        to the option's type, as from a configuration file).
    :param probe: an :class:`~.probe.AccessProbe` instance, class or path.
    :param capabilities: what the driver declares (see
        :func:`parse_capabilities`); undeclared ones come from the class
        attribute ``conformance_capabilities``, then from the driver
        (``protocol``, whether ``fence_clients`` is overridden, the
        ``multiattach`` of its volume stats).  Cinder's ``STORAGE_PROTOCOL``
        counts as ``protocol`` (RBD: ``ceph``).
    :param connector_factory: ``f(host_name, protocol) -> connector``
        (default: :func:`default_connector`).
    :param extra_flags: more Cinder flags, as ``_get_flags`` returns them
        (``{name: {'v': value, 'g': group}}``), e.g. the zone manager's.
    :param privsep_in_process: run ``cinder.privsep.sys_admin_pctxt`` in
        this process (Cinder's harness cannot start a privsep daemon);
        default: when running as root.
    """

    def __init__(self, driver, options=None, probe=None, capabilities=None,
                 connector_factory=None, extra_flags=None, name=None,
                 privsep_in_process=None):
        self.driver = driver
        self.options = dict(options or {})
        self.probe = probe
        self.declared = parse_capabilities(capabilities)
        self.connector_factory = connector_factory or default_connector
        self.extra_flags = dict(extra_flags or {})
        self.name = name
        self.privsep_in_process = (os.geteuid() == 0
                                   if privsep_in_process is None
                                   else privsep_in_process)
        self.ignored_options = []
        #: the capabilities of the last run (with the driver's stats).
        self.resolved = None

    @classmethod
    def from_config(cls, path, backend, driver=None, **kwargs):
        """A target from section *backend* of the cinder.conf at *path*.

        The section's ``volume_driver`` is used when *driver* is None.
        """
        # [DEFAULT] is Cinder's global section, not a backend's defaults.
        parser = configparser.RawConfigParser(
            strict=False, default_section='conformance:no-defaults')
        parser.optionxform = str
        if not parser.read(path):
            raise ValueError('cannot read %s' % path)
        if not parser.has_section(backend):
            raise ValueError('%s has no section [%s] (sections: %s)' % (
                path, backend, ', '.join(parser.sections())))
        options = dict(parser.items(backend))
        driver = driver or options.get('volume_driver')
        if not driver:
            raise ValueError('no driver: give --driver or set volume_driver '
                             'in [%s]' % backend)
        options.setdefault('volume_backend_name', backend)
        return cls(driver, options, name=kwargs.pop('name', backend),
                   **kwargs)

    # -- resolution --------------------------------------------------------

    @property
    def driver_class(self):
        if isinstance(self.driver, str):
            self.driver = probe_mod.load_class(self.driver)
        return self.driver

    @property
    def driver_path(self):
        cls = self.driver_class
        return '%s.%s' % (cls.__module__, cls.__qualname__)

    def get_probe(self):
        if self.probe is None:
            raise ValueError('no probe: give --probe module.Class')
        self.probe = probe_mod.load(self.probe)
        return self.probe

    def capabilities(self, driver=None):
        """The capability dict: declared, class attribute, then derived."""
        cls = self.driver_class
        caps = parse_capabilities(getattr(cls, 'conformance_capabilities',
                                          None))
        caps.update(self.declared)
        if 'protocol' not in caps:
            caps['protocol'] = normalize_protocol(
                getattr(cls, 'protocol', None) or
                getattr(cls, 'storage_protocol', None) or
                getattr(cls, 'STORAGE_PROTOCOL', None))
        if 'fencing' not in caps:
            caps['fencing'] = (getattr(cls, 'fence_clients', None) is not
                               mixin.ForceDetachMixin.fence_clients)
        if 'multiattach' not in caps and driver is not None:
            stats = driver.get_volume_stats(refresh=False) or {}
            caps['multiattach'] = bool(stats.get('multiattach'))
        return caps

    def register_options(self):
        """Register the driver's options in the backend group.

        Returns the flags (``_get_flags`` form) that set the target's
        options; records options no one registered in
        :attr:`ignored_options`.
        """
        cls = self.driver_class
        get_opts = getattr(cls, 'get_driver_options', None)
        for opt in (get_opts() if get_opts else []):
            try:
                CONF.register_opt(opt, group=BACKEND)
            except cfg.DuplicateOptError:
                pass
        flags, self.ignored_options = {}, []
        for name, value in sorted(self.options.items()):
            if name in SKIPPED_OPTIONS:
                continue
            if name in CONF[BACKEND]:
                flags[name] = {'v': value, 'g': BACKEND}
            elif name in CONF:
                flags[name] = {'v': value}
            else:
                self.ignored_options.append(name)
        return flags

    def __str__(self):
        return self.name or self.driver_path


def use_database_file(test):
    """Point an in-process Cinder at this process's SQLite database file.

    One path per process for every harness and test class: oslo.db builds
    its engine once, from the connection set when a test first used it.
    A file rather than ``sqlite://`` so that a forked child (a crash test,
    a host's volume-service process) sees the services' database.
    """
    if not cinder_test.DB_SCHEMA:
        # Cache the schema from a scratch in-memory database: Cinder's
        # fixture would migrate the test database itself, which then
        # already has the tables.
        engine = sqlalchemy.create_engine('sqlite://')
        migration.db_sync(engine=engine)
        with engine.connect() as conn:
            cinder_test.DB_SCHEMA = ''.join(conn.connection.iterdump())
        engine.dispose()
    path = os.path.join(tempfile.gettempdir(),
                        'cinder-forcedetach-%d.sqlite' % os.getpid())
    files = [path + suffix for suffix in ('', '-wal', '-shm')]

    def remove():
        for name in files:
            if os.path.exists(name):
                os.unlink(name)
    remove()
    # Children (a host's volume service, a local command) write it while
    # this process's services do.  In SQLite's default journal a write
    # that meets another process's commit fails at once ("database is
    # locked": seen three times in clean-clone runs); in WAL mode (kept
    # in the file, for every process that opens it) a writer waits for
    # the other, up to a minute.
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute('PRAGMA journal_mode=WAL')
    CONF.set_override('connection', 'sqlite:///%s?timeout=60' % path,
                      'database')
    test.addCleanup(remove)
    # A read transaction that then writes after another process's commit
    # fails at once even in WAL mode: the children this process starts
    # (a local command) take the write lock first (their sitecustomize).
    # Not this process: its services are green threads, and one waiting
    # in SQLite's busy handler would block the one holding the lock.
    test.useFixture(fixtures.EnvironmentVariable(
        'PYTHONPATH', sqlite_locking.pythonpath(
            *filter(None, [os.environ.get('PYTHONPATH')]))))


# What keystonemiddleware sets for a request with a valid service token
# (Cinder's API runs with noauth here): Cinder's bug 2004555 guard then
# lets a service detach an attachment Nova holds.
SERVICE_HEADERS = {'X-Service-Roles': 'service'}


class CinderServices(functional_helpers._FunctionalTestBase):
    """Cinder's API, scheduler and one volume service in this process.

    The one harness of the kit and of our functional tests: subclasses
    say which driver the volume service loads (``_get_flags``), how a host
    connects (:meth:`connector`) and whether privileged calls run in this
    process (:attr:`privsep_in_process`: Cinder's harness cannot start a
    privsep daemon).  Its helpers call Cinder's API as Nova and operators
    do, and read Cinder's database.  The database is a SQLite file (see
    :func:`use_database_file`).
    """

    MOCK_TOOZ = False
    _osapi_version = '3.70'
    privsep_in_process = False

    def setUp(self):
        use_database_file(self)
        if self.privsep_in_process:
            cinder.privsep.sys_admin_pctxt.set_client_mode(False)
            self.addCleanup(cinder.privsep.sys_admin_pctxt.set_client_mode,
                            True)
        super(CinderServices, self).setUp()
        self.api.create_type(self._vol_type_name)
        self.driver = self.volume.manager.driver
        self.ctxt = context.get_admin_context()

    def _get_flags(self):
        f = super(CinderServices, self)._get_flags()
        f['default_volume_type'] = {'v': self._vol_type_name}
        # The reconciler would outlive these services in this process and
        # cut a reset's leak on its own: who wants it turns it on.
        f['forcedetach_reconcile_interval'] = {'v': 0, 'g': BACKEND}
        return f

    def _start_api_service(self):
        # pip installs api-paste.ini under <venv>/etc, not next to cinder/.
        paste = os.path.join(sys.prefix, 'etc', 'cinder', 'api-paste.ini')
        if not os.path.exists(paste):
            return super(CinderServices, self)._start_api_service()
        with fixtures.MonkeyPatch('os.path.abspath', lambda p: paste
                                  if p.endswith('api-paste.ini') else
                                  os.path.normpath(p)):
            super(CinderServices, self)._start_api_service()

    def connector(self, host):
        """The connector *host* sends (as os-brick builds it for Nova)."""
        raise NotImplementedError()

    # -- waiting -------------------------------------------------------------

    def _wait_status(self, get, kind, resource_id, statuses, timeout):
        deadline = time.monotonic() + timeout
        while True:
            found = get(resource_id)
            if found['status'] in statuses:
                return found
            if time.monotonic() > deadline:
                self.fail('%s %s stayed %s, wanted %s' % (
                    kind, resource_id, found['status'], statuses))
            time.sleep(0.05)

    def wait_volume(self, volume_id, statuses, timeout=60):
        """The volume once its status is one of *statuses*; else fail."""
        return self._wait_status(self.api.get_volume, 'volume', volume_id,
                                 statuses, timeout)

    def wait_snapshot(self, snapshot_id, statuses=('available', 'error'),
                      timeout=60):
        return self._wait_status(self.api.get_snapshot, 'snapshot',
                                 snapshot_id, statuses, timeout)

    # -- Cinder, as Nova and operators drive it ------------------------------

    def create_volume(self, size=1, **extra):
        """A new volume, once ``available`` or ``error``."""
        body = {'size': size}
        body.update(extra)
        vol = self.api.post_volume({'volume': body})
        return self.wait_volume(vol['id'], ('available', 'error'))

    def multiattach_type(self, name='forcedetach-multiattach'):
        """A volume type whose volumes may be attached to several hosts."""
        types = [t['name'] for t in self.api.api_get('/types')['volume_types']]
        if name not in types:
            self.api.api_post('/types', {'volume_type': {
                'name': name, 'extra_specs': {'multiattach': '<is> True'}}})
        return name

    def reserve(self, volume_id):
        """An attachment without a connector (Nova's reservation)."""
        return self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': volume_id}})['attachment']

    def update_attachment(self, attachment_id, connector):
        return self.api.api_put('/attachments/%s' % attachment_id,
                                {'attachment': {'connector': connector}})

    def attach(self, volume_id, host, complete=True, instance=None):
        """Attachment create (+ os-complete) for *host*; the attachment.

        *instance*: the server's id, as Nova sends it (default: none).
        Its ``connection_info`` is what the driver granted.
        """
        body = {'volume_uuid': volume_id, 'connector': self.connector(host)}
        if instance:
            body['instance_uuid'] = instance
        att = self.api.api_post('/attachments',
                                {'attachment': body})['attachment']
        if complete:
            self.api.api_post('/attachments/%s/action' % att['id'],
                              {'os-complete': {}},
                              check_response_status=[204])
        return att

    def reset_status(self, volume_id, **body):
        """``os-reset_status`` (``cinder reset-state``): Cinder's rows only.

        ``status='available', attach_status='detached'`` as ``cinder
        reset-state --state available --attach-status detached`` sends it
        (the attachments are ended); ``status='available'`` alone as
        Horizon's "Update Volume Status" (the attachments stay).
        """
        self.api.api_post('/volumes/%s/action' % volume_id,
                          {'os-reset_status': body},
                          check_response_status=[202])

    def force_detach_api(self, volume_id, connector=None, attachment_id=None,
                         status=202, service=False):
        """os-force_detach; *service*: as a service (Nova's token)."""
        body = {'os-force_detach': {}}
        if connector is not None:
            body['os-force_detach']['connector'] = connector
        if attachment_id:
            body['os-force_detach']['attachment_id'] = attachment_id
        return self.api.api_post('/volumes/%s/action' % volume_id, body,
                                 check_response_status=[status],
                                 headers=SERVICE_HEADERS if service else {})

    def db_volume(self, volume_id):
        return objects.Volume.get_by_id(self.ctxt, volume_id)

    def db_state(self, volume_id):
        """What Cinder's database says of the volume and its attachments."""
        vol = self.db_volume(volume_id)
        return (vol.status, vol.attach_status,
                sorted((a.id, a.attach_status)
                       for a in vol.volume_attachment))


class CinderHarness(CinderServices):
    """The kit's services: the volume service loads ``target``'s driver.

    A subclass sets the class attribute ``target`` (a :class:`Target`).
    """

    _vol_type_name = 'conformance'
    target = None

    def setUp(self):
        if self.target is None:
            raise ValueError('%s has no target' % type(self).__name__)
        self.privsep_in_process = self.target.privsep_in_process
        super(CinderHarness, self).setUp()
        self.probe = self.target.get_probe()
        self.caps = self.target.capabilities(self.driver)
        self.target.resolved = dict(self.caps)

    def _get_flags(self):
        f = super(CinderHarness, self)._get_flags()
        f['volume_driver'] = {'v': self.target.driver_path, 'g': BACKEND}
        f.update(self.target.register_options())
        f.update(self.target.extra_flags)
        return f

    def connector(self, host):
        return self.target.connector_factory(host, self.caps.get('protocol'))

    def create_volume(self, multiattach=False, size=1):
        """The id of a new ``available`` volume (else RuntimeError)."""
        extra = {'volume_type': self.multiattach_type(
            'conformance-multiattach')} if multiattach else {}
        vol = super(CinderHarness, self).create_volume(size, **extra)
        if vol['status'] != 'available':
            raise RuntimeError('volume %s is %s after create' % (
                vol['id'], vol['status']))
        return vol['id']
