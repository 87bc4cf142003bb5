"""The RBD driver against a real single-node Ceph cluster, in real Cinder.

Nothing is faked on the storage side: the module brings up its own Ceph
(``tools/ceph-dev.sh up`` in a private directory, on free ports, with
client.cinder allowed to lift blocklist entries), once per test process,
and purges it at the end (:func:`tests.support.ceph.get_cluster`).
Cinder's API, scheduler and volume services run in-process (the harness
of :mod:`tests.functional.base` without tgtd) and load
``cinder_forcedetach.drivers.rbd.RBDDriver``.

A "host" holding a volume is a real librbd client: a Python subprocess
(:class:`tests.support.ceph.Writer`) that opens the image from the
attachment's connection_info (monitor addresses + user, as os-brick
would) and writes numbered blocks in a loop, printing the result of each
write.  Each compute host gets its own loopback address (127.0.0.11,
127.0.0.12, ...): a tiny LD_PRELOAD shim, compiled with gcc, binds the
client's sockets to it, so the driver sees the client at the address the
host's connector names.  Without gcc every client is 127.0.0.1 and the
multiattach test is skipped.

Set ``CINDER_FORCEDETACH_TEST_CEPH_DIR`` to use (and keep) a cluster made
by ``tools/ceph-dev.sh`` in that directory instead.
"""

import errno
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

from cinder import exception
from cinder import objects
import cinder.privsep
from cinder.volume import volume_utils
import ddt
from oslo_config import cfg

from cinder_forcedetach.ceph import fencing
from cinder_forcedetach.ceph import rbd_io
# Imported before flags are set, so that its options are registered.
from cinder_forcedetach.drivers import rbd as rbd_driver  # noqa: F401
from cinder_forcedetach import exception as fd_exception
from cinder_forcedetach.flows import force_detach as flow
from tests import fakes
from tests.functional import base
from tests.support import ceph
from tests.support import waiting

try:
    import rados
    import rbd
except ImportError:  # pragma: no cover - depends on the host
    rados = rbd = None

CONF = cfg.CONF
DRIVER = 'cinder_forcedetach.drivers.rbd.RBDDriver'
CRASH_EXIT = base.CRASH_EXIT
BLOCK = ceph.BLOCK
HOST_IPS = ceph.HOST_IPS


def tearDownModule():
    ceph.release_cluster()


# -- the harness --------------------------------------------------------------


def connector_for(host, **extra):
    connector = {'host': host, 'ip': HOST_IPS.get(host, '127.0.0.1'),
                 'platform': 'x86_64', 'os_type': 'linux',
                 'multipath': False, 'do_local_attach': False}
    connector.update(extra)
    return connector


class RBDTestCase(base.CinderServicesTestCase):
    """Real Cinder services in-process on the real Ceph cluster."""

    _vol_type_name = 'rbd-forcedetach'

    @classmethod
    def setUpClass(cls):
        super(RBDTestCase, cls).setUpClass()
        cls.cluster = ceph.get_cluster()

    def setUp(self):
        super(RBDTestCase, self).setUp()
        self.writers = []
        self.addCleanup(self._stop_writers)
        self.workdir = tempfile.mkdtemp(prefix='cfd-rbd-test-')
        self.addCleanup(shutil.rmtree, self.workdir, True)

    def _get_flags(self):
        f = super(RBDTestCase, self)._get_flags()
        g = base.BACKEND
        c = self.cluster
        for key, value in (('volume_driver', DRIVER),
                           ('rbd_ceph_conf', c.conf), ('rbd_user', c.user),
                           ('rbd_pool', c.pool),
                           ('forcedetach_rbd_keyring', c.keyring),
                           ('forcedetach_rbd_timeout', 10),
                           ('forcedetach_rbd_fence_verify_timeout', 10.0),
                           ('volume_backend_name', 'rbd')):
            f[key] = {'v': value, 'g': g}
        return f

    def _stop_writers(self):
        for writer in self.writers:
            if not writer.stopped:
                writer.stop()

    # -- helpers ----------------------------------------------------------

    def connector(self, host):
        return connector_for(host)

    def writer(self, info, host, **kwargs):
        w = ceph.Writer(self.cluster, info, host, **kwargs)
        self.writers.append(w)
        w.wait_oks(3)
        return w

    def attached_volume(self, host='compute1', **vol):
        vol = self.create_volume(**vol)
        att, info = self.attach(vol['id'], host)
        writer = self.writer(info, host)
        self.assertEqual('in-use', self.api.get_volume(vol['id'])['status'])
        return vol['id'], att, info, writer

    def two_host_writers(self):
        """A multiattach volume written by compute1 and compute2.

        Returns ``(volume id, (attachment, writer) of compute1, ... of
        compute2)``; skips without the bind shim (gcc), which gives each
        host its own address.
        """
        if not self.cluster.shim:
            self.skipTest('needs the bind shim (gcc) to give each host its '
                          'own address')
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_a, info_a = self.attach(vol_id, 'compute1')
        att_b, info_b = self.attach(vol_id, 'compute2')
        return (vol_id,
                (att_a, self.writer(info_a, 'compute1', tag='A', base=0)),
                (att_b, self.writer(info_b, 'compute2', tag='B',
                                    base=10000)))

    def image_name(self, volume_id):
        return 'volume-%s' % volume_id

    def read_blocks(self, volume_id, first, count, pool=None, name=None):
        client = self.cluster.connect()
        try:
            with client.open_ioctx(pool or self.cluster.pool) as ioctx:
                with rbd.Image(ioctx, name or self.image_name(volume_id),
                               read_only=True) as image:
                    data = image.read(first * BLOCK, count * BLOCK)
        finally:
            client.shutdown()
        return [data[i * BLOCK:(i + 1) * BLOCK] for i in range(count)]

    def new_client_writes(self, volume_id, block=b'N' * BLOCK, offset=None):
        """A new client opens the image and writes; returns seconds taken."""
        t0 = time.monotonic()
        client = self.cluster.connect()
        try:
            with client.open_ioctx(self.cluster.pool) as ioctx:
                with rbd.Image(ioctx, self.image_name(volume_id)) as image:
                    if offset is None:
                        offset = image.size() - BLOCK
                    image.write(block, offset)
                    image.flush()
                    self.assertEqual(block, image.read(offset, len(block)))
        finally:
            client.shutdown()
        return time.monotonic() - t0

    def assert_fenced_cleanly(self, writer, volume_id, fence_returned,
                              timeout=10):
        """The writer was fenced, cleanly.

        Its writes fail with errno 108 from the fence on, none is reported
        OK after the fence returned, and nothing it wrote after the fence
        landed is in the image; everything acknowledged is.  *timeout*:
        how long its first failure may take.
        """
        seq, err_no, name, _t = writer.wait_fenced(timeout)
        writer.finish()
        self.assertEqual(('108', 'ConnectionShutdown'), (err_no, name),
                         writer.lines[-8:])
        oks = writer.oks()
        late = [(s, t) for s, t in oks if t > fence_returned]
        self.assertEqual([], late, 'writes succeeded after the fence')
        errs = writer.errs()
        self.assertGreaterEqual(len(errs), 5)
        self.assertEqual({'108'}, {e[1] for e in errs})
        last_ok = max(s for s, _t in oks)
        self.assertEqual(last_ok + 1, seq)
        blocks = self.read_blocks(volume_id, writer.base,
                                  max(e[0] for e in errs) + 1)
        for s in range(last_ok + 1):
            self.assertEqual(ceph.block_for(writer.tag, s), blocks[s],
                             'acknowledged write %d lost' % s)
        # A write in flight as the fence landed may or may not be there;
        # every later one must not.
        for s in range(seq + 1, len(blocks)):
            self.assertEqual(b'\0' * BLOCK, blocks[s],
                             'write %d landed after the fence' % s)


# -- fencing ------------------------------------------------------------------


@ddt.ddt
class FenceTestCase(RBDTestCase):

    def test_force_detach_fences_the_writer(self):
        vol_id, att, info, writer = self.attached_volume('compute1')
        self.assertEqual(HOST_IPS['compute1'] if self.cluster.shim
                         else '127.0.0.1', fencing.addr_ip(writer.addr))

        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        fence_returned = time.time()
        self.new_client_writes(vol_id)

        self.assert_detached(vol_id)
        self.assert_fenced_cleanly(writer, vol_id, fence_returned)
        self.assertIn(writer.addr, self.cluster.blocklist())
        fences = self.driver.list_fences(self.db_volume(vol_id))
        # every host's clients were fenced (no connector)
        self.assertEqual([(writer.addr, True, ['*'])],
                         [(f['addr'], f['active'], f['hosts'])
                          for f in fences])

    def test_api_force_detach_with_connector(self):
        """Cinder's own os-force_detach: terminate_connection fences."""
        vol_id, att, info, writer = self.attached_volume('compute1')
        self.force_detach_api(vol_id, connector=connector_for('compute1'),
                              attachment_id=att['id'])
        fence_returned = time.time()
        self.wait_volume(vol_id, ('available',))
        self.assert_fenced_cleanly(writer, vol_id, fence_returned)
        self.new_client_writes(vol_id)
        self.assert_detached(vol_id)
        self.assertEqual(
            [(writer.addr, ['compute1'])],
            [(f['addr'], f['hosts'])
             for f in self.driver.list_fences(self.db_volume(vol_id))])

    def test_api_force_detach_without_connector(self):
        vol_id, att, info, writer = self.attached_volume('compute1')
        self.force_detach_api(vol_id, attachment_id=att['id'])
        fence_returned = time.time()
        self.wait_volume(vol_id, ('available',))
        self.assert_fenced_cleanly(writer, vol_id, fence_returned)

    def test_attachment_delete_of_a_closed_client_fences_nothing(self):
        vol_id = self.create_volume()['id']
        att, info = self.attach(vol_id, 'compute1')
        writer = self.writer(info, 'compute1', count=20)
        writer.finish()             # wrote its 20 blocks and closed
        self.assertEqual([], writer.errs())
        self.api.api_delete('/attachments/%s' % att['id'])
        self.wait_volume(vol_id, ('available',))
        self.assertEqual([], self.driver.list_fences(self.db_volume(vol_id)))

    def test_attachment_delete_of_a_live_client_fences_it(self):
        vol_id, att, info, writer = self.attached_volume('compute1')
        self.api.api_delete('/attachments/%s' % att['id'])
        fence_returned = time.time()
        self.wait_volume(vol_id, ('available',))
        self.assert_fenced_cleanly(writer, vol_id, fence_returned)

    def test_force_detach_twice_is_a_success(self):
        vol_id, att, info, writer = self.attached_volume()
        volume = self.db_volume(vol_id)
        self.driver.force_detach(self.ctxt, volume, attachment_id=att['id'])
        fence_returned = time.time()
        self.driver.force_detach(self.ctxt, volume, attachment_id=att['id'])
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        for _ in range(2):
            self.assertEqual([], self.driver.fence_clients(
                volume, [connector_for('compute1')], []))
            self.assertFalse(self.driver.revoke_host_access(
                volume, connector_for('compute1')))
            self.driver.remove_export(self.ctxt, volume)
        self.assert_detached(vol_id)
        self.assert_fenced_cleanly(writer, vol_id, fence_returned)
        self.assertEqual(1, len(self.driver.list_fences(volume)))

    def test_other_host_connector_fences_nothing(self):
        vol_id, att, info, writer = self.attached_volume('compute1')
        volume = self.db_volume(vol_id)
        # compute1's attachment stays (what terminate_connection passes)
        self.assertEqual([], self.driver.fence_clients(
            volume, [connector_for('compute2')],
            list(volume.volume_attachment)))
        if self.cluster.shim:
            writer.wait_oks(3)
            self.assertEqual([], writer.errs())

    def test_lift_fence(self):
        vol_id, att, info, writer = self.attached_volume()
        volume = self.db_volume(vol_id)
        self.driver.force_detach(self.ctxt, volume)
        writer.wait_fenced()
        self.assertIn(writer.addr, self.cluster.blocklist())
        self.assertEqual([writer.addr], self.driver.lift_fence(writer.addr))
        self.assertNotIn(writer.addr, self.cluster.blocklist())
        self.assertEqual([], self.driver.list_fences(volume))
        # The old handle stays dead; lifting twice is a no-op success.
        writer.finish()
        self.assertEqual([], [s for s, t in writer.oks()
                              if s > writer.errs()[0][0]])
        self.assertEqual([], self.driver.lift_fence(volume))

    def cli_json(self, *args):
        res = self.local_cli(*args)
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertNotIn(self.cluster.cinder_key, res.stdout + res.stderr)
        return json.loads(res.stdout)

    def test_fence_cli_list_and_lift(self):
        """The operator's ``fence list|lift`` on the recorded fences."""
        vol_id, att, info, writer = self.attached_volume()
        other_id, _a, _i, other = self.attached_volume('compute2')
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.driver.force_detach(self.ctxt, self.db_volume(other_id))
        writer.wait_fenced()
        other.wait_fenced()

        fences = self.cli_json('fence', 'list', '--volume', vol_id)
        self.assertEqual([(writer.addr, vol_id, True)],
                         [(f['addr'], f['volume_id'], f['active'])
                          for f in fences])
        listed = {f['addr'] for f in self.cli_json('fence', 'list')}
        self.assertLessEqual({writer.addr, other.addr}, listed)

        lifted = self.cli_json('fence', 'lift', '--volume', vol_id)
        self.assertEqual({'lifted': [writer.addr]}, lifted)
        self.assertNotIn(writer.addr, self.cluster.blocklist())
        self.assertEqual([], self.cli_json('fence', 'list', '--volume',
                                           vol_id))
        # The other volume's fence is untouched; lifting again is a success.
        self.assertIn(other.addr, self.cluster.blocklist())
        self.assertEqual({'lifted': []},
                         self.cli_json('fence', 'lift', '--volume', vol_id))
        self.assertEqual({'lifted': [other.addr]},
                         self.cli_json('fence', 'lift', '--address',
                                       other.addr))
        self.assertNotIn(other.addr, self.cluster.blocklist())

    def test_fence_cli_errors(self):
        vol_id, att, info, writer = self.attached_volume()
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        writer.wait_fenced()
        res = self.local_cli('fence', 'lift', '--volume', str(uuid.uuid4()))
        self.assertEqual(2, res.returncode, res.stderr)
        self.assertIn('not found', res.stderr)
        res = self.local_cli('fence', 'list', '--backend', 'nosuch')
        self.assertEqual(2, res.returncode, res.stderr)
        self.assertIn('backend nosuch is not enabled', res.stderr)

        mon = self.cluster.mon_pid()
        os.kill(mon, signal.SIGSTOP)
        try:
            res = self.local_cli('fence', 'lift', '--volume', vol_id)
        finally:
            os.kill(mon, signal.SIGCONT)
        self.assertEqual(4, res.returncode, res.stderr)
        self.assertNotIn(self.cluster.cinder_key, res.stdout + res.stderr)
        # Nothing was lifted: the fence and its record are still there.
        self.assertIn(writer.addr, self.cluster.blocklist())
        self.assertEqual([writer.addr], [
            f['addr'] for f in self.cli_json('fence', 'list', '--volume',
                                             vol_id)])

    # -- crashes --------------------------------------------------------------

    def _crash_in_child(self, volume_id, patch):
        def run():
            patch()
            self.driver.force_detach(self.ctxt, self.db_volume(volume_id))
        base.crash_in_child(self, run)

    @ddt.data('_blocklist_add', flow.FenceClientsTask, flow.RemoveExportTask)
    def test_crash_then_rerun(self, where):
        vol_id, att, info, writer = self.attached_volume()
        if isinstance(where, str):
            owner, name = fencing.Fencing, where
        else:
            owner, name = where, 'execute'
        real = getattr(owner, name)

        def patch():
            @functools.wraps(real)
            def crashing(*args, **kwargs):
                real(*args, **kwargs)
                os._exit(CRASH_EXIT)
            setattr(owner, name, crashing)

        self._crash_in_child(vol_id, patch)
        fence_landed = time.time()
        # Cinder untouched, the client already fenced.
        volume = self.db_volume(vol_id)
        self.assertEqual(('in-use', 1), (volume.status,
                                         len(volume.volume_attachment)))
        writer.wait_fenced()
        self.assertIn(writer.addr, self.cluster.blocklist())

        self.driver.force_detach(self.ctxt, volume)
        self.assert_detached(vol_id)
        self.assert_fenced_cleanly(writer, vol_id, fence_landed)
        self.new_client_writes(vol_id)

    # -- the cluster unreachable ---------------------------------------------

    def test_monitor_down_fails_and_leaves_db_unchanged(self):
        vol_id, att, info, writer = self.attached_volume()
        volume = self.db_volume(vol_id)
        mon = self.cluster.mon_pid()
        os.kill(mon, signal.SIGSTOP)
        try:
            err = self.assertRaises(fd_exception.ForceDetachFailed,
                                    self.driver.force_detach, self.ctxt,
                                    volume)
            # The OSD session of the client is still up: it still writes.
            writer.wait_oks(3)
        finally:
            os.kill(mon, signal.SIGCONT)
        self.assertIn('FenceClientsTask', str(err))
        self.assertIn('Ceph cluster unavailable', str(err))
        volume = self.db_volume(vol_id)
        self.assertEqual(('in-use', 'attached', [att['id']]),
                         (volume.status, volume.attach_status,
                          [a.id for a in volume.volume_attachment]))
        self.assertEqual([], writer.errs())
        # The monitor is back: the re-run fences and detaches.
        self.driver.force_detach(self.ctxt, volume)
        fence_returned = time.time()
        self.assert_detached(vol_id)
        self.assert_fenced_cleanly(writer, vol_id, fence_returned)

    # -- multiattach ----------------------------------------------------------

    def test_multiattach_fences_one_host_and_keeps_the_other(self):
        vol_id, (att_a, a), (att_b, b) = self.two_host_writers()

        self.driver.force_detach(self.ctxt, self.db_volume(vol_id),
                                 connector=connector_for('compute1'))
        fence_returned = time.time()

        self.assert_fenced_cleanly(a, vol_id, fence_returned)
        b.wait_oks(10)
        self.assertEqual([], b.errs())
        self.assertNotEqual([], [s for s, t in b.oks()
                                 if t > fence_returned])
        self.assertNotIn(b.addr, self.cluster.blocklist())
        volume = self.db_volume(vol_id)
        self.assertEqual('in-use', volume.status)
        self.assertEqual([att_b['id']],
                         [x.id for x in volume.volume_attachment])
        # The same host detaching again, or all hosts but the one that
        # stays, never touches compute2's client.
        self.driver.fence_clients(volume, [None],
                                  list(volume.volume_attachment))
        b.wait_oks(5)
        self.assertEqual([], b.errs())

    # -- clients at another address than their connector's ip ---------------

    @ddt.data('api', 'flow')
    def test_client_at_another_address_is_fenced(self, path):
        """compute1's connector says 127.0.0.11, its client uses .21.

        A multi-homed host (or Nova's my_block_storage_ip differing from
        the source address on the Ceph network): with no attachment
        staying, the client is fenced whatever its address.
        """
        if not self.cluster.shim:
            self.skipTest('needs the bind shim (gcc)')
        vol_id = self.create_volume()['id']
        att, info = self.attach(vol_id, 'compute1')
        writer = self.writer(info, 'compute1', bind_ip='127.0.0.21')
        self.assertEqual('127.0.0.21', fencing.addr_ip(writer.addr))

        if path == 'api':
            self.force_detach_api(vol_id,
                                  connector=connector_for('compute1'),
                                  attachment_id=att['id'])
            self.wait_volume(vol_id, ('available',))
        else:
            self.driver.force_detach(self.ctxt, self.db_volume(vol_id),
                                     connector=connector_for('compute1'))
        fence_returned = time.time()

        self.assert_fenced_cleanly(writer, vol_id, fence_returned)
        self.new_client_writes(vol_id)
        self.assert_detached(vol_id)
        self.assertIn(writer.addr, self.cluster.blocklist())
        self.assertEqual([writer.addr], [
            f['addr'] for f in self.driver.list_fences(
                self.db_volume(vol_id))])

    def test_multiattach_unexplained_client_fails_the_force_detach(self):
        """compute2 stays, but its client is not at its connector's ip.

        Fencing it could cut off an attachment that stays; sparing it
        could leave a detached host writing: the force-detach of compute1
        fails, naming the client, with nothing fenced and Cinder's
        database unchanged.  Without a connector, every host is fenced.
        """
        if not self.cluster.shim:
            self.skipTest('needs the bind shim (gcc)')
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_a, info_a = self.attach(vol_id, 'compute1')
        att_b, info_b = self.attach(vol_id, 'compute2')
        a = self.writer(info_a, 'compute1', tag='A', base=0)
        b = self.writer(info_b, 'compute2', tag='B', base=10000,
                        bind_ip='127.0.0.22')
        self.assertEqual('127.0.0.22', fencing.addr_ip(b.addr))
        volume = self.db_volume(vol_id)

        err = self.assertRaises(fd_exception.ForceDetachFailed,
                                self.driver.force_detach, self.ctxt,
                                volume, connector=connector_for('compute1'))
        self.assertIn('FenceClientsTask', str(err))
        # what Cinder's os-force_detach and attachment delete run
        err2 = self.assertRaises(fd_exception.ForceDetachFailed,
                                 self.driver.terminate_connection,
                                 self.db_volume(vol_id),
                                 connector_for('compute1'))
        for message in (str(err), str(err2)):
            self.assertIn(b.addr, message)
            self.assertNotIn(a.addr, message)
            self.assertIn('without a connector', message)

        volume = self.db_volume(vol_id)
        self.assertEqual(
            ('in-use', 'attached', {att_a['id'], att_b['id']}),
            (volume.status, volume.attach_status,
             {x.id for x in volume.volume_attachment}))
        self.assertEqual({'attached'}, {x.attach_status
                                        for x in volume.volume_attachment})
        blocklist = self.cluster.blocklist()
        self.assertNotIn(a.addr, blocklist)
        self.assertNotIn(b.addr, blocklist)
        self.assertEqual([], self.driver.list_fences(volume))
        for writer in (a, b):
            writer.wait_oks(5)
            self.assertEqual([], writer.errs())

        # Every host: both clients fenced, the volume detached.
        self.driver.force_detach(self.ctxt, volume)
        fence_returned = time.time()
        self.assert_fenced_cleanly(a, vol_id, fence_returned)
        self.assert_fenced_cleanly(b, vol_id, fence_returned)
        self.assert_detached(vol_id)
        self.new_client_writes(vol_id)


# -- connection_info refresh --------------------------------------------------


class AuditTestCase(RBDTestCase):
    """``cinder-forcedetach audit`` on RBD: live clients are the evidence.

    The pool is shared with the other tests of this process: findings are
    filtered to this test's volumes.
    """

    def audit(self, *args):
        res = self.local_cli('audit', '--grace', '0', '--no-nova', *args)
        self.assertNotIn(self.cluster.cinder_key, res.stdout + res.stderr)
        try:
            data = json.loads(res.stdout)
        except ValueError:
            self.fail('audit printed no JSON (exit %d): %s' % (
                res.returncode, res.stderr[-3000:]))
        return res.returncode, data['findings']

    def mine(self, findings, *volume_ids):
        return sorted((f['case'], f['host'], f['result']) for f in findings
                      if f['volume'] in volume_ids)

    def test_live_client_after_reset_state_is_found_and_fenced(self):
        vol_id, _att, _info, writer = self.attached_volume('compute1')
        self.api.api_post('/volumes/%s/action' % vol_id,
                          {'os-reset_status': {'status': 'available',
                                               'attach_status': 'detached'}},
                          check_response_status=[202])
        writer.wait_oks(3)

        code, findings = self.audit()
        self.assertEqual(3, code)
        ip = fencing.addr_ip(writer.addr)
        self.assertEqual([('leaked_export', ip, 'found')],
                         self.mine(findings, vol_id))
        writer.wait_oks(3)      # a plain audit touches nothing

        fix_started = time.time()
        code, findings = self.audit('--fix', '--case', 'leaked_export')
        self.assertEqual([('leaked_export', ip, 'repaired')],
                         self.mine(findings, vol_id))
        self.assert_fenced_cleanly(writer, vol_id, time.time())
        self.assertLess(fix_started, writer.errs()[0][3])
        self.assertIn(writer.addr, self.cluster.blocklist())
        self.new_client_writes(vol_id)
        _code, findings = self.audit()
        self.assertEqual([], self.mine(findings, vol_id))

    def test_watch_of_a_killed_client_is_found_and_fenced(self):
        """A client killed with SIGKILL keeps its watch until it expires."""
        vol_id, _att, _info, writer = self.attached_volume('compute1')
        writer.stop()                   # SIGKILL: no close, no unwatch
        self.api.api_post('/volumes/%s/action' % vol_id,
                          {'os-reset_status': {'status': 'available',
                                               'attach_status': 'detached'}},
                          check_response_status=[202])
        code, findings = self.audit('--fix')
        self.assertEqual([('leaked_export', fencing.addr_ip(writer.addr),
                           'repaired')], self.mine(findings, vol_id))
        self.assertIn(writer.addr, self.cluster.blocklist())
        self.new_client_writes(vol_id)
        _code, findings = self.audit()
        self.assertEqual([], self.mine(findings, vol_id))

    def test_host_cinder_forgot_is_fenced_the_other_kept(self):
        vol_id, (att_a, a), (_att_b, b) = self.two_host_writers()
        objects.VolumeAttachment.get_by_id(self.ctxt, att_a['id']).destroy()

        code, findings = self.audit('--fix')
        self.assertEqual([('leaked_export', HOST_IPS['compute1'],
                           'repaired')], self.mine(findings, vol_id))
        a.wait_fenced()
        b.wait_oks(10)
        self.assertEqual([], b.errs())
        self.assertEqual('in-use', self.db_volume(vol_id).status)
        _code, findings = self.audit()
        self.assertEqual([], self.mine(findings, vol_id))

    def test_fence_that_outlived_its_volume_is_lifted(self):
        vol_id, _att, _info, writer = self.attached_volume('compute1')
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        writer.wait_fenced()
        writer.finish()
        self.api.delete_volume(vol_id)
        self.wait_volume_gone(vol_id)
        self.assertIn(writer.addr, self.cluster.blocklist())

        _code, findings = self.audit()
        self.assertEqual([('stale_fence', None, 'found')],
                         self.mine(findings, vol_id))
        _code, findings = self.audit('--fix', '--case', 'stale_fence')
        self.assertEqual([('stale_fence', None, 'repaired')],
                         self.mine(findings, vol_id))
        self.assertNotIn(writer.addr, self.cluster.blocklist())
        _code, findings = self.audit()
        self.assertEqual([], self.mine(findings, vol_id))

    def wait_volume_gone(self, volume_id, timeout=60):
        waiting.wait_for(
            lambda: volume_id not in [v['id'] for v in self.api.get_volumes()],
            timeout, 'volume %s deleted' % volume_id, interval=0.2)


class RefreshTestCase(RBDTestCase):

    def refresh_cli(self, attachment_id):
        return self.local_cli('attachment', 'refresh', attachment_id)

    def stored_info(self, attachment_id):
        return objects.VolumeAttachment.get_by_id(
            self.ctxt, attachment_id).connection_info

    def test_refresh_after_monitor_move(self):
        vol_id = self.create_volume()['id']
        att, info = self.attach(vol_id, 'compute1')
        old_host = self.cluster.mon_host
        self.assertEqual([old_host], info['hosts'])
        self.assertEqual([old_host], self.stored_info(att['id'])['hosts'])
        new_host = '127.0.0.2' if old_host != '127.0.0.2' else '127.0.0.1'

        self.cluster.move_mon(new_host)
        self.addCleanup(self.cluster.move_mon, old_host)

        # A client given the stored connection_info cannot reach it.
        self.assertRaises(AssertionError, ceph.Writer, self.cluster,
                          self.stored_info(att['id']), 'compute1',
                          mount_timeout=3)

        res = self.refresh_cli(att['id'])
        self.assertEqual(0, res.returncode, res.stderr)
        printed = json.loads(res.stdout)
        self.assertEqual(att['id'], printed['attachment_id'])
        self.assertEqual([new_host], printed['connection_info']['hosts'])
        self.assertNotIn(self.cluster.cinder_key, res.stdout + res.stderr)

        stored = self.stored_info(att['id'])
        self.assertEqual([new_host], stored['hosts'])
        self.assertEqual([self.cluster.mon_port], stored['ports'])
        # what Cinder's manager added is kept
        for key in ('access_mode', 'encrypted', 'attachment_id',
                    'driver_volume_type', 'qos_specs'):
            self.assertEqual(info[key], stored[key], key)
        self.assertNotIn('keyring', stored)
        writer = self.writer(stored, 'compute1')
        self.assertEqual([], writer.errs())

        # The driver method itself, in-process: same answer, idempotent.
        attachment = objects.VolumeAttachment.get_by_id(self.ctxt, att['id'])
        again = self.driver.refresh_connection_info(self.ctxt, attachment)
        self.assertEqual(stored, again)

    def test_refresh_errors(self):
        vol_id = self.create_volume()['id']
        att, _info = self.attach(vol_id, 'compute1')
        res = self.refresh_cli(str(uuid.uuid4()))
        self.assertEqual(2, res.returncode, res.stderr)
        reserved = self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': self.create_volume()['id']}})['attachment']
        res = self.refresh_cli(reserved['id'])
        self.assertEqual(1, res.returncode, res.stderr)
        self.assertIn('no live connection', res.stderr)


class ISCSIRefreshTestCase(base.CinderTgtTestCase):
    """The same refresh on the tgt iSCSI driver: the portal moved.

    Here beside the RBD refresh (same feature); it needs tgtd, not Ceph.
    The volume host's portal moves to another port the way an operator
    moves it: tgtd gets the new portal, loses the old one, and the
    backend's ``target_port`` changes.
    """

    def test_refresh_after_portal_move(self):
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        old = info['target_portal']
        new = '127.0.0.1:%d' % fakes.free_tcp_port()
        self.tgtd.tgtadm('--op', 'new', '--mode', 'portal', '--param',
                         'portal=' + new)
        self.tgtd.tgtadm('--op', 'delete', '--mode', 'portal', '--param',
                         'portal=' + old)
        self.override_config('target_port', int(new.split(':')[1]),
                             base.BACKEND)

        attachment = objects.VolumeAttachment.get_by_id(self.ctxt, att['id'])
        refreshed = self.driver.refresh_connection_info(self.ctxt,
                                                        attachment)
        stored = objects.VolumeAttachment.get_by_id(
            self.ctxt, att['id']).connection_info
        self.assertEqual(refreshed, stored)
        self.assertEqual((new, [new]), (stored['target_portal'],
                                        stored['target_portals']))
        for key in ('access_mode', 'attachment_id', 'driver_volume_type'):
            self.assertEqual(info[key], stored[key], key)
        self.login(stored, 'compute1')      # writes through the new portal


# -- reimage and volume operations --------------------------------------------


@ddt.ddt
class ImageTestCase(RBDTestCase):

    IMAGE_MB = 12

    def setUp(self):
        super(ImageTestCase, self).setUp()
        # upstream's image checks call the format inspector through
        # privsep: run it in-process (we are root)
        cinder.privsep.sys_admin_pctxt.set_client_mode(False)
        self.addCleanup(cinder.privsep.sys_admin_pctxt.set_client_mode, True)
        self.images = fakes.FakeImageService()
        self.commands = []
        real = self.driver._execute

        def recording(*cmd, **kwargs):
            self.commands.append([str(c) for c in cmd])
            return real(*cmd, **kwargs)
        self.driver._execute = recording

    def image_data(self):
        """A sparse pattern: a few stamped blocks, the rest holes."""
        data = bytearray(self.IMAGE_MB * 1024 * 1024)
        for i in range(0, len(data) // BLOCK, 97):
            data[i * BLOCK:(i + 1) * BLOCK] = ceph.block_for('IMG', i)
        return bytes(data)

    def rbd_image(self, data, fmt='raw'):
        """An image in the images pool with a snapshot, as Glance makes."""
        image_id = str(uuid.uuid4())
        client = self.cluster.connect()
        try:
            with client.open_ioctx(self.cluster.images_pool) as ioctx:
                if fmt == 'raw':
                    rbd.RBD().create(ioctx, image_id, len(data))
                    with rbd.Image(ioctx, image_id) as image:
                        for off in range(0, len(data), 1 << 20):
                            chunk = data[off:off + (1 << 20)]
                            if chunk.count(0) != len(chunk):
                                image.write(chunk, off)
                        image.create_snap('snap')
                else:
                    raw = os.path.join(self.workdir, 'src.raw')
                    with open(raw, 'wb') as f:
                        f.write(data)
                    spec = rbd_io.qemu_rbd_spec(
                        self.cluster.images_pool, image_id,
                        user=self.cluster.user, conf=self.cluster.conf)
                    subprocess.run(['qemu-img', 'convert', '-f', 'raw',
                                    '-O', fmt, raw, spec], check=True,
                                   capture_output=True)
                    with rbd.Image(ioctx, image_id) as image:
                        image.create_snap('snap')
        finally:
            client.shutdown()

        def reader():
            c = self.cluster.connect()
            try:
                with c.open_ioctx(self.cluster.images_pool) as io:
                    with rbd.Image(io, image_id, snapshot='snap',
                                   read_only=True) as image:
                        size = image.size()
                        for off in range(0, size, 1 << 20):
                            yield image.read(off, min(1 << 20, size - off))
            finally:
                c.shutdown()
        url = 'rbd://%s/%s/%s/snap' % (self.cluster.fsid,
                                       self.cluster.images_pool, image_id)
        self.images.add(image_id, disk_format=fmt, url=url, reader=reader)
        return image_id

    def volume_with_old_data(self, **vol):
        vol_id = self.create_volume(**vol)['id']
        client = self.cluster.connect()
        try:
            with client.open_ioctx(self.cluster.pool) as ioctx:
                with rbd.Image(ioctx, self.image_name(vol_id)) as image:
                    for i in range(0, 4096, 61):
                        image.write(b'OLD!' * 1024, i * BLOCK)
        finally:
            client.shutdown()
        return vol_id

    def volume_bytes(self, vol_id, length):
        return b''.join(self.read_blocks(vol_id, 0, length // BLOCK))

    def image_info(self, vol_id):
        client = self.cluster.connect()
        try:
            with client.open_ioctx(self.cluster.pool) as ioctx:
                with rbd.Image(ioctx, self.image_name(vol_id),
                               read_only=True) as image:
                    try:
                        parent = image.get_parent_image_spec()
                    except rbd.ImageNotFound:
                        parent = None
                    return parent, image.size()
        finally:
            client.shutdown()

    def reimage(self, vol_id, image_id):
        """What Cinder's manager does for os-reimage."""
        volume = self.db_volume(vol_id)
        location = self.images.get_location(self.ctxt, image_id)
        volume_utils.copy_image_to_volume(
            self.driver, self.ctxt, volume, self.images.show(self.ctxt,
                                                             image_id),
            location, self.images, disable_sparse=True)

    def assert_no_secret_on_command_lines(self):
        key = self.cluster.cinder_key
        for cmd in self.commands:
            self.assertEqual([], [a for a in cmd if key in a or ':key=' in a],
                             'a key on a command line')

    @ddt.data(False, True)
    def test_reimage_by_clone(self, flatten):
        self.override_config('forcedetach_rbd_reimage_flatten', flatten,
                             base.BACKEND)
        data = self.image_data()
        image_id = self.rbd_image(data)
        vol_id = self.volume_with_old_data()
        self.reimage(vol_id, image_id)
        parent, size = self.image_info(vol_id)
        self.assertEqual(1 << 30, size)
        if flatten:
            self.assertIsNone(parent)
        else:
            self.assertEqual((self.cluster.images_pool, image_id, 'snap'),
                             (parent['pool_name'], parent['image_name'],
                              parent['snap_name']))
        self.assertEqual(data, self.volume_bytes(vol_id, len(data)))
        self.assertEqual([], self.commands)      # no qemu-img, no rbd CLI
        # the volume is usable and deletable with its parent in place
        self.new_client_writes(vol_id)
        self.api.delete_volume(vol_id)

    def test_reimage_of_a_volume_with_snapshots_streams_in_place(self):
        data = self.image_data()
        image_id = self.rbd_image(data)
        vol_id = self.volume_with_old_data()
        snap = self.api.post_snapshot({'snapshot': {'volume_id': vol_id}})
        self._wait_snapshot(snap['id'])
        self.reimage(vol_id, image_id)
        parent, _size = self.image_info(vol_id)
        self.assertIsNone(parent)
        self.assertEqual(data, self.volume_bytes(vol_id, len(data)))
        converts = [c for c in self.commands if c[:2] == ['qemu-img',
                                                          'convert']]
        self.assertEqual(1, len(converts))
        self.assertTrue(converts[0][-2].startswith('rbd:%s/%s@snap' % (
            self.cluster.images_pool, image_id)))
        self.assertTrue(converts[0][-1].startswith('rbd:%s/volume-%s:' % (
            self.cluster.pool, vol_id)))
        self.assert_no_secret_on_command_lines()
        # the snapshot still holds the old data
        vol2 = self.api.post_volume({'volume': {'snapshot_id': snap['id'],
                                                'size': 1}})
        self.wait_volume(vol2['id'], ('available',))
        self.assertEqual(b'OLD!' * 1024, self.read_blocks(vol2['id'], 0,
                                                          1)[0])

    def test_reimage_qcow2_in_cluster_by_qemu_img(self):
        data = self.image_data()
        image_id = self.rbd_image(data, fmt='qcow2')
        vol_id = self.volume_with_old_data()
        self.reimage(vol_id, image_id)
        self.assertIsNone(self.image_info(vol_id)[0])
        self.assertEqual(data, self.volume_bytes(vol_id, len(data)))
        self.assertIn('qcow2', self.commands[-1])
        self.assert_no_secret_on_command_lines()

    def test_reimage_never_reads_a_file_location_itself(self):
        # Was: qemu-img read the file:// location directly, bypassing
        # allowed_direct_url_schemes (issue 8 item 2).  The data comes
        # from the image service's download(), streamed (no qemu-img).
        data = self.image_data()
        secret = self.host_secret()
        image_id = str(uuid.uuid4())
        self.images.add(image_id, url='file://' + secret, size=len(data),
                        reader=lambda: iter([data]))
        vol_id = self.volume_with_old_data()
        self.reimage(vol_id, image_id)
        self.assertEqual(data, self.volume_bytes(vol_id, len(data)))
        self.assertEqual([], self.commands)

    # -- Cinder's image gates (issue 8 item 2) ---------------------------

    def host_secret(self):
        """A host file standing in for the node's cinder.conf."""
        path = os.path.join(self.workdir, 'cinder.conf')
        with open(path, 'wb') as f:
            f.write((b'password = HOST-SECRET\n' * 65536)[:1 << 20])
        return path

    def rbd_image_of(self, path, declared):
        """An images-pool image holding *path*'s bytes, declared so."""
        with open(path, 'rb') as f:
            image_id = self.rbd_image(f.read())
        self.images.images[image_id]['meta']['disk_format'] = declared
        return image_id

    def assert_refused(self, vol_id, image_id, reason):
        try:
            self.reimage(vol_id, image_id)
            err = None
        except exception.ImageUnacceptable as exc:
            err = exc
        data = self.volume_bytes(vol_id, 1 << 20)
        self.assertNotIn(b'HOST-SECRET', data,
                         'the host file reached the volume')
        self.assertEqual(b'OLD!' * 1024, data[:BLOCK],
                         'the refused image touched the old data')
        self.assertIsNone(self.image_info(vol_id)[0])   # no clone either
        self.assertIsNotNone(err, 'the image was not refused')
        self.assertIn(reason, str(err))

    def test_reimage_refuses_qcow2_declared_raw_in_cluster(self):
        raw = os.path.join(self.workdir, 'q.raw')
        with open(raw, 'wb') as f:
            f.write(self.image_data())
        qcow2 = os.path.join(self.workdir, 'q.qcow2')
        subprocess.run(['qemu-img', 'convert', '-f', 'raw', '-O', 'qcow2',
                        raw, qcow2], check=True)
        image_id = self.rbd_image_of(qcow2, 'raw')
        self.assert_refused(self.volume_with_old_data(), image_id,
                            'declared raw but its data is qcow2')

    def test_reimage_refuses_in_cluster_qcow2_backed_by_a_host_file(self):
        qcow2 = os.path.join(self.workdir, 'b.qcow2')
        subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', '-b',
                        self.host_secret(), '-F', 'raw', qcow2, '1M'],
                       check=True)
        image_id = self.rbd_image_of(qcow2, 'qcow2')
        self.assert_refused(self.volume_with_old_data(), image_id,
                            'backing_file')

    def test_reimage_refuses_in_cluster_vmdk_naming_a_host_file(self):
        vmdk = os.path.join(self.workdir, 'flat.vmdk')
        with open(vmdk, 'w') as f:
            f.write('# Disk DescriptorFile\nversion=1\nCID=fffffffe\n'
                    'parentCID=ffffffff\ncreateType="monolithicFlat"\n\n'
                    'RW 2048 FLAT "%s" 0\n\n#DDB\n'
                    'ddb.virtualHWVersion = "4"\n' % self.host_secret())
        image_id = self.rbd_image_of(vmdk, 'vmdk')
        self.assert_refused(self.volume_with_old_data(), image_id,
                            'Safety checks failed: descriptor')

    def test_reimage_of_a_qcow2_from_outside_the_cluster(self):
        # upstream's fetch_to_raw into a temporary file, then qemu-img
        data = self.image_data()
        raw = os.path.join(self.workdir, 'o.raw')
        with open(raw, 'wb') as f:
            f.write(data)
        qcow2 = os.path.join(self.workdir, 'o.qcow2')
        subprocess.run(['qemu-img', 'convert', '-f', 'raw', '-O', 'qcow2',
                        raw, qcow2], check=True)
        image_id = str(uuid.uuid4())
        self.images.add(image_id, disk_format='qcow2',
                        size=os.path.getsize(qcow2),
                        reader=lambda: iter([open(qcow2, 'rb').read()]))
        vol_id = self.volume_with_old_data()
        self.reimage(vol_id, image_id)
        self.assertEqual(data, self.volume_bytes(vol_id, len(data)))
        self.assertEqual(['qemu-img', 'convert', '-n', '-f', 'raw'],
                         self.commands[-1][:5])
        self.assert_no_secret_on_command_lines()

    def test_reimage_from_the_image_service_stream(self):
        data = self.image_data()
        image_id = str(uuid.uuid4())
        self.images.add(image_id, size=len(data), reader=lambda: iter(
            [data[i:i + 65536] for i in range(0, len(data), 65536)]))
        vol_id = self.volume_with_old_data()
        self.reimage(vol_id, image_id)
        self.assertEqual(data, self.volume_bytes(vol_id, len(data)))
        self.assertEqual([], self.commands)

    def test_reimage_stream_of_an_allowed_file_location(self):
        # allowed_direct_url_schemes has file: upstream's download() would
        # read the location itself; the stream reads it with its holes
        # (SEEK_DATA/SEEK_HOLE), nothing comes from the image service.
        self.override_config('allowed_direct_url_schemes', ['file'])
        data = self.image_data()
        path = os.path.join(self.workdir, 'sparse.raw')
        with open(path, 'wb') as f:
            f.truncate(len(data))
            for i in range(0, len(data) // BLOCK, 97):
                f.seek(i * BLOCK)
                f.write(data[i * BLOCK:(i + 1) * BLOCK])
        image_id = self.images.add(path=path, url='file://' + path)
        vol_id = self.volume_with_old_data()
        self.reimage(vol_id, image_id)
        self.assertEqual(data, self.volume_bytes(vol_id, len(data)))
        self.assertEqual(([], 0), (self.images.downloads,
                                   self.images.served))
        self.assertEqual([], self.commands)

    def test_reimage_stream_fails_when_a_write_fails(self):
        # A real librbd write error: the stream's client is blocklisted
        # once the volume is open; its asynchronous writes fail (errno
        # 108) and so does the copy, instead of reporting it done.
        vol_id = self.volume_with_old_data()
        name = self.image_name(vol_id)
        fenced = []

        def reader():
            yield ceph.block_for('IMG', 0) * ((1 << 20) // BLOCK)
            client = self.cluster.connect()
            try:
                with client.open_ioctx(self.cluster.pool) as ioctx:
                    with rbd.Image(ioctx, name, read_only=True) as image:
                        watchers = [w['addr'] for w in image.watchers_list()]
                for addr in watchers:
                    client.blocklist_add(addr, 600)
                    fenced.append(addr)
            finally:
                client.shutdown()
            for i in range(1, 16):
                yield ceph.block_for('IMG', i) * ((1 << 20) // BLOCK)
        self.addCleanup(lambda: [self.cluster.admin(
            'osd', 'blocklist', 'rm', addr) for addr in fenced])
        image_id = str(uuid.uuid4())
        self.images.add(image_id, size=16 << 20, reader=reader)
        # (Cinder's copy_image_to_volume wraps it as ImageCopyFailure)
        err = self.assertRaises(exception.ImageCopyFailure, self.reimage,
                                vol_id, image_id)
        self.assertIn('[Errno %d] RBD write of' % errno.ESHUTDOWN, str(err))
        self.assertEqual(1, len(fenced), fenced)
        self.assertEqual([], self.commands)

    def test_volume_operations(self):
        """Snapshots, clone v2 children, clones, extend, delete orders."""
        stats = self.driver.get_volume_stats(refresh=True)
        self.assertEqual(('up', 'ceph', 'rbd'), (
            stats['backend_state'], stats['storage_protocol'].lower(),
            stats['volume_backend_name']))
        self.assertGreater(stats['total_capacity_gb'], 1)
        self.assertGreater(stats['free_capacity_gb'], 1)
        self.assertIn(self.cluster.fsid, stats['location_info'])
        vol_id = self.volume_with_old_data()
        snap = self.api.post_snapshot({'snapshot': {'volume_id': vol_id}})
        self._wait_snapshot(snap['id'])
        child = self.api.post_volume({'volume': {'snapshot_id': snap['id'],
                                                 'size': 2}})
        child = self.wait_volume(child['id'], ('available', 'error'))
        self.assertEqual('available', child['status'])
        parent, size = self.image_info(child['id'])
        self.assertEqual('volume-%s' % vol_id, parent['image_name'])
        self.assertEqual(2 << 30, size)
        clone = self.api.post_volume({'volume': {'source_volid': vol_id,
                                                 'size': 1}})
        clone = self.wait_volume(clone['id'], ('available', 'error'))
        self.assertEqual('available', clone['status'])
        # Upstream's clone: copy-on-write of a snapshot of the source (up
        # to rbd_max_clone_depth), not a flattened copy.
        self.assertEqual('volume-%s' % vol_id,
                         self.image_info(clone['id'])[0]['image_name'])
        for vid in (child['id'], clone['id']):
            self.assertEqual(b'OLD!' * 1024, self.read_blocks(vid, 0, 1)[0])
        self.api.api_post('/volumes/%s/action' % clone['id'],
                          {'os-extend': {'new_size': 3}},
                          check_response_status=[202])
        self.wait_volume(clone['id'], ('available',))
        self.assertEqual(3 << 30, self.image_info(clone['id'])[1])
        # The parent goes first: its snapshot, then itself, with a clone
        # v2 child still alive (librbd keeps it in the trash).
        self.api.delete_snapshot(snap['id'])
        self._wait_gone('/snapshots/%s' % snap['id'])
        self.api.delete_volume(vol_id)
        self._wait_gone('/volumes/%s' % vol_id)
        self.assertEqual(b'OLD!' * 1024,
                         self.read_blocks(child['id'], 0, 1)[0])
        for vid in (child['id'], clone['id']):
            self.api.delete_volume(vid)
            self._wait_gone('/volumes/%s' % vid)
        client = self.cluster.connect()
        try:
            with client.open_ioctx(self.cluster.pool) as ioctx:
                names = rbd.RBD().list(ioctx)
        finally:
            client.shutdown()
        for vid in (child['id'], clone['id']):
            self.assertEqual([], [n for n in names if vid in n], names)
        # Upstream's delete keeps a parent that still has clone children
        # as a silent reference ("<name>.deleted") and removes it with its
        # last child; with a clone v2 child of a deleted snapshot (kept in
        # the trash namespace) Cinder 29 leaves it behind: upstream's
        # behaviour, which the drop-in keeps.  Nothing else may remain.
        self.assertEqual([], [n for n in names if vol_id in n and
                              n != 'volume-%s.deleted' % vol_id], names)

    def test_copy_volume_to_image_and_back(self):
        vol_id = self.volume_with_old_data()
        images = fakes.FakeImageService()
        image_id = images.add()
        self.driver.copy_volume_to_image(self.ctxt, self.db_volume(vol_id),
                                         images, images.show(None, image_id))
        uploaded = images.uploads
        self.assertEqual(1 << 30, len(uploaded[image_id]))
        self.assertEqual(b'OLD!' * 1024, uploaded[image_id][:BLOCK])
        self.assertEqual([], self.commands)

    def _wait_snapshot(self, snap_id, timeout=30):
        self.wait_snapshot(snap_id, ('available',), timeout=timeout)

    def _wait_gone(self, path, timeout=30):
        from cinder.tests.functional.api import client as api_client
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.api.api_get(path)
            except api_client.OpenStackApiException404:
                return
            time.sleep(0.1)
        self.fail('%s still exists' % path)
