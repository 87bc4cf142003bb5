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

"""Real Cinder, in-process, loading our driver against a real tgtd.

Cinder's own functional harness (shipped in the ``cinder`` wheel) starts
the WSGI API, scheduler and volume services in this process over
oslo.messaging's ``fake:/`` transport and SQLite; the volume service loads
``cinder_forcedetach.drivers.iscsi.TgtISCSIDriver``, which drives a tgtd
this test started.  Tooz locks are real (file backend).
"""


import collections
import os
import subprocess
import sys

from cinder.volume import configuration
import fixtures
from oslo_config import cfg

# Imported before flags are set, so that its options are registered.
from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import initiator as qemu_io
from cinder_forcedetach.conformance import sqlite_locking
from cinder_forcedetach.conformance import suite
from cinder_forcedetach.drivers import iscsi  # noqa: F401
from tests.support import cutoff
from tests.support import tgtd as tgtd_daemon

CONF = cfg.CONF
REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DRIVER = 'cinder_forcedetach.drivers.iscsi.TgtISCSIDriver'
BACKEND = configuration.SHARED_CONF_GROUP
SERVICE = harness.SERVICE_HEADERS


#: The exit status of a child a crash test kills with ``os._exit``.
CRASH_EXIT = suite.CRASH_EXIT


def crash_in_child(test, run):
    """Run *run* in a forked child that must die with :data:`CRASH_EXIT`.

    *run* arms its crash (``os._exit(CRASH_EXIT)`` at the chosen point)
    and does the work, in a new native thread of the child (the kit's
    :func:`cinder_forcedetach.conformance.suite.run_in_child`, whose
    docstring says why that is sound, Ceph included); a child that
    returns, raises or hangs instead fails *test*, with its traceback.
    """
    status, why = suite.run_in_child(run)
    test.assertEqual(CRASH_EXIT, status,
                     'the child did not crash where asked: ' + why)


def initiator_name(host):
    return 'iqn.2026-11.org.cinder-forcedetach.test:%s' % host


def connector_for(host, **extra):
    connector = {'host': host, 'initiator': initiator_name(host),
                 'ip': '127.0.0.1', 'platform': 'x86_64', 'os_type': 'linux',
                 'multipath': False}
    connector.update(extra)
    return connector


class CinderServicesTestCase(harness.CinderServices):
    """Cinder API + scheduler + volume services loading one of our drivers.

    The kit's harness (:class:`~cinder_forcedetach.conformance.harness.
    CinderServices`) with our tests' connectors; subclasses set the
    backend's flags in ``_get_flags``.
    """

    def connector(self, host):
        return connector_for(host)

    def write_cinder_conf(self):
        """cinder.conf of this test's volume service, for local commands.

        The flags this test gave Cinder's services (``_get_flags``), with
        their database, lock path, coordination backend and host: what
        ``cinder-forcedetach`` reads on a volume host.
        """
        sections = collections.defaultdict(dict)
        for name, flag in self._get_flags().items():
            value = flag['v']
            sections[flag.get('g', 'DEFAULT')][name] = (
                ','.join(map(str, value)) if isinstance(value, list)
                else value)
        lock_path = CONF.oslo_concurrency.lock_path
        sections['DEFAULT'].update(host=self.volume.host,
                                   state_path=lock_path, lock_path=lock_path)
        sections['oslo_concurrency']['lock_path'] = lock_path
        sections['database']['connection'] = CONF.database.connection
        sections['coordination']['backend_url'] = \
            CONF.coordination.backend_url
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'cinder.conf')
        # Privileged calls (tgtadm) start a privsep helper: we are root, it
        # needs no sudo in front (as the box's cinder.conf has it).
        for section in ('cinder_sys_admin', 'privsep_osbrick'):
            sections[section]['helper_command'] = '%s --config-file %s' % (
                os.path.join(sys.prefix, 'bin', 'privsep-helper'), path)
        with open(path, 'w') as f:
            for section, options in sections.items():
                f.write('[%s]\n' % section)
                for name, value in sorted(options.items()):
                    f.write('%s = %s\n' % (name, value))
        return path

    def local_cli(self, *args):
        """``cinder-forcedetach --format json ARGS`` on this volume host.

        Without the harness's ``CEPH_*`` variables, which an operator's
        shell does not have: the command finds Ceph through cinder.conf.
        """
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('CEPH_')}
        env['PYTHONPATH'] = sqlite_locking.pythonpath(REPO)
        return subprocess.run(
            [sys.executable, '-m', 'cinder_forcedetach.cmd.manage',
             '--format', 'json'] + list(args) +
            ['--config-file', self.write_cinder_conf()],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=120)

    def attach(self, volume_id, host, complete=True, instance=None):
        """Attachment API (3.27+) as Nova drives it; returns (att, info)."""
        att = super(CinderServicesTestCase, self).attach(
            volume_id, host, complete=complete, instance=instance)
        return att, att['connection_info']

    def revert(self, volume_id, snapshot_id):
        """os-revert (3.40) to *snapshot_id*; waits until available."""
        self.api.api_post('/volumes/%s/action' % volume_id,
                          {'revert': {'snapshot_id': snapshot_id}},
                          check_response_status=[202])
        return self.wait_volume(volume_id, ('available',))

    def assert_detached(self, volume_id):
        """Cinder: available, detached, no attachment left."""
        self.assertEqual(('available', 'detached', []),
                         self.db_state(volume_id))


class CinderTgtTestCase(CinderServicesTestCase):
    """Our iSCSI driver in Cinder's services, on a real tgtd."""

    _vol_type_name = 'forcedetach'
    # We are root: tgtadm runs in this process, not through a privsep
    # daemon (Cinder's harness forbids starting one).
    privsep_in_process = True

    def setUp(self):
        self.volumes_dir = self.useFixture(fixtures.TempDir()).path
        self.tgtd = self.make_tgtd()
        super(CinderTgtTestCase, self).setUp()
        self.initiators = []
        self.addCleanup(self._close_initiators)

    def _get_flags(self):
        f = super(CinderTgtTestCase, self)._get_flags()
        f['volume_driver'] = {'v': DRIVER, 'g': BACKEND}
        f['forcedetach_tgt_control_port'] = {'v': self.tgtd.control_port,
                                             'g': BACKEND}
        f['forcedetach_volumes_dir'] = {'v': self.volumes_dir, 'g': BACKEND}
        f['target_ip_address'] = {'v': self.tgtd.address, 'g': BACKEND}
        f['target_port'] = {'v': self.tgtd.port, 'g': BACKEND}
        return f

    def make_tgtd(self):
        """The test's tgtd; a subclass may place it elsewhere."""
        return self.useFixture(tgtd_daemon.TgtdFixture()).tgtd

    def host_prefix(self, host):
        """The command prefix that runs a program on *host*: none here."""
        return ()

    # -- helpers ----------------------------------------------------------

    def login(self, connection_info, host):
        """A live qemu-io initiator holding the volume for *host*."""
        data = connection_info
        if 'data' in data:
            data = data['data']
        session = qemu_io.QemuIoInitiator(
            data['target_portal'], data['target_iqn'], initiator_name(host),
            data.get('auth_username'), data.get('auth_password'),
            lun=data['target_lun'], prefix=self.host_prefix(host))
        self.initiators.append(session)
        # The volume whose backing store its cut-off check reads.
        session.volume_id = data.get('volume_id') or (
            data['target_iqn'].rsplit('volume-', 1)[-1])
        # Its first write is the control of a cut-off check that follows
        # (tests with more between call control_write again).
        cutoff.control_write(self, session, 0x5a)
        return session

    def backing_path(self, volume_id):
        return self.driver.local_path(self.db_volume(volume_id))

    def backing_block(self, volume_id, offset):
        """The 4 KiB block at *offset* of the volume's backing file."""
        return cutoff.backing_reader(self.backing_path(volume_id))(
            offset, cutoff.BLOCK)

    def control_write(self, session, pattern=0x5a, offset=0):
        """A control write on *session* right before a teardown."""
        return cutoff.control_write(self, session, pattern, offset)

    def assert_cut_off(self, session, pattern=0xee, offset=None,
                       volume_id=None, control=None, read=False,
                       backing=None):
        """:func:`.cutoff.assert_cut_off` on the volume's backing file.

        *control*: the session's last control write unless given.
        """
        if backing is None:
            backing = self.backing_path(volume_id or session.volume_id)
        return cutoff.assert_cut_off(
            self, session, backing, pattern, offset,
            control or getattr(session, 'control', None), read=read)

    def _close_initiators(self):
        for session in self.initiators:
            session.close()

    def target_state(self, volume_id):
        name = CONF[BACKEND].target_prefix + 'volume-%s' % volume_id
        return self.driver.target.find(name)
