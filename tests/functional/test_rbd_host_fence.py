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

"""A host fence on RBD: one host cut off all its volumes at once.

Real Cinder services in-process loading
``cinder_forcedetach.drivers.rbd.RBDDriver`` on the real single-node Ceph
of :mod:`.test_rbd`; every "host" is a live librbd client
(:class:`tests.support.ceph.Writer`) bound by the LD_PRELOAD shim to its
host's own loopback address (compute1 127.0.0.11, compute2 127.0.0.12).
Host A (compute1) holds five volumes, one of them multiattach and also
held by host B (compute2); ``RBDDriver.fence_host(ctx, A, volumes)``
(the force-detach flow per volume, the Ceph work in one batch) must:

* fence every one of A's writers: errno 108 (ConnectionShutdown), no write
  acknowledged after the call returned, nothing written from its first
  failure on in the image, everything acknowledged before there;
* leave B's writer on the multiattach volume writing, not blocklisted;
* reset each volume's database for A's attachments only (the multiattach
  volume stays in-use with B's attachment); one blocklist entry per client;
* succeed as a no-op when run again;
* with the monitor unreachable, fail every volume in bounded time and leave
  the volumes and attachments in Cinder's database as they were;
* fail alone a volume whose clients nothing explains, the others fenced;
* do all of that from the operator's ``cinder-forcedetach host fence``.
"""

import json
import os
import signal
import time

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach.ceph import fencing
from cinder_forcedetach import exception as fd_exception
from devbox import partitions
from tests.functional import test_rbd
from tests.support import ceph

HOST_IPS = ceph.HOST_IPS
BLOCK = ceph.BLOCK
connector_for = test_rbd.connector_for
#: Where the evacuated volumes' new host writes (A writes from block 0).
SUCCESSOR_BASE = 20000
#: A cut-off client's connection resumes on TCP's next retransmission
#: after the heal (exponential backoff): seconds here; wait well past.
RECONNECT_WAIT = 60


def tearDownModule():
    ceph.release_cluster()


class RBDHostFenceTestCase(test_rbd.RBDTestCase):

    def setUp(self):
        super(RBDHostFenceTestCase, self).setUp()
        if not self.cluster.shim:
            self.fail('the bind shim (gcc) is needed to give each host '
                      'its own address')

    # -- helpers --------------------------------------------------------------

    def host_a(self, singles=4, preexec_fn=None):
        """A's volumes: *singles* of its own, one shared with B.

        A's writers start with *preexec_fn* (its partition's group).
        Returns ``(volume ids, {volume id: A's writer}, shared volume id,
        B's attachment, B's writer)``.
        """
        ids, writers = [], {}
        for i in range(singles):
            vol_id = self.create_volume()['id']
            _att, info = self.attach(vol_id, 'compute1')
            ids.append(vol_id)
            writers[vol_id] = self.writer(info, 'compute1', tag='A%d' % i,
                                          preexec_fn=preexec_fn)
        shared = self.create_volume(
            volume_type=self.multiattach_type())['id']
        _att_a, info_a = self.attach(shared, 'compute1')
        att_b, info_b = self.attach(shared, 'compute2')
        ids.append(shared)
        writers[shared] = self.writer(info_a, 'compute1', tag='AS',
                                      preexec_fn=preexec_fn)
        b = self.writer(info_b, 'compute2', tag='B', base=10000)
        return ids, writers, shared, att_b, b

    def rows(self, volume_ids):
        """What Cinder's database says of each volume and its attachments."""
        rows = {}
        for vol_id in volume_ids:
            volume = self.db_volume(vol_id)
            rows[vol_id] = (volume.status, volume.attach_status, sorted(
                (a.id, a.attach_status, a.attached_host)
                for a in volume.volume_attachment))
        return rows

    def fence_a(self, volume_ids, **kwargs):
        report = self.driver.fence_host(
            self.ctxt, connector_for('compute1'),
            [self.db_volume(v) for v in volume_ids], **kwargs)
        return report, time.time()

    def assert_b_writes_on(self, shared, b, since):
        b.wait_oks(10)
        self.assertEqual([], b.errs(), b.lines[-8:])
        self.assertNotEqual([], [s for s, t in b.oks() if t > since])
        seq = max(s for s, _t in b.oks())
        self.assertEqual(ceph.block_for('B', seq),
                         self.read_blocks(shared, b.base + seq, 1)[0])
        self.assertNotIn(b.addr, self.cluster.blocklist())

    def assert_only_a_detached(self, ids, shared, att_b):
        for vol_id in ids:
            if vol_id != shared:
                self.assert_detached(vol_id)
        volume = self.db_volume(shared)
        self.assertEqual(('in-use', 'attached'),
                         (volume.status, volume.attach_status))
        self.assertEqual([(att_b['id'], 'attached', 'compute2')],
                         [(a.id, a.attach_status, a.attached_host)
                          for a in volume.volume_attachment])
        for vol_id in ids:
            self.assertIsNone(fd_attachments.hosts_in_teardown(
                self.db_volume(vol_id)))

    def assert_held(self, writers, settle=3.0, watch=2.0):
        """Every writer's write hangs: none acknowledged, none failed.

        After *settle* seconds (a write sent before the cut may still be
        acknowledged: only the writer's packets are dropped), none of them
        advances for *watch* seconds more.
        """
        def read_for(seconds):
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                for writer in writers:
                    writer.poll(0.05)
        read_for(settle)
        acknowledged = [len(w.oks()) for w in writers]
        read_for(watch)
        self.assertEqual(acknowledged, [len(w.oks()) for w in writers],
                         'a writer of the cut-off host was acknowledged')
        self.assertEqual([[]] * len(writers), [w.errs() for w in writers])

    # -- the cases ------------------------------------------------------------

    def test_fence_host_cuts_every_client_of_the_host_once(self):
        ids, writers, shared, att_b, b = self.host_a()
        before = self.cluster.blocklist()

        report, returned = self.fence_a(ids)

        self.assertEqual({}, report.failed)
        self.assertEqual({v: [writers[v].addr] for v in ids}, report.done)
        for vol_id in ids:
            self.assert_fenced_cleanly(writers[vol_id], vol_id, returned)
        self.assert_b_writes_on(shared, b, returned)
        self.assert_only_a_detached(ids, shared, att_b)
        # one entry per client instance, nothing else
        self.assertEqual({w.addr for w in writers.values()},
                         self.cluster.blocklist() - before)
        for vol_id in ids:
            fences = self.driver.list_fences(self.db_volume(vol_id))
            self.assertEqual([(writers[vol_id].addr, True, ['compute1'])],
                             [(f['addr'], f['active'], f['hosts'])
                              for f in fences])
            if vol_id != shared:
                self.assertLess(self.new_client_writes(vol_id), 5.0)

        # A second run: nothing of A holds anything; a success that
        # changes nothing, B still untouched.
        rows = self.rows(ids)
        blocklist = self.cluster.blocklist()
        again, again_returned = self.fence_a(ids)
        self.assertEqual(({}, {v: [] for v in ids}),
                         (again.failed, again.done))
        self.assertEqual(rows, self.rows(ids))
        self.assertEqual(blocklist, self.cluster.blocklist())
        self.assert_b_writes_on(shared, b, again_returned)
        for vol_id in ids:
            self.assertEqual(1, len(self.driver.list_fences(
                self.db_volume(vol_id))))

    def test_partitioned_host_fenced_while_writing_lands_nothing_after(self):
        """A cut off from Ceph, alive and writing: fenced, evacuated, healed.

        The evacuation case (a failed switch port, not a crash): A's
        writers run in a cgroup of their own and the partition drops
        everything they send to the monitors and OSDs
        (:mod:`devbox.partitions`).  Each write hangs in librados, which
        resends it once the network is back.  A is fenced while cut off,
        its own volumes attach on compute2 and are written there; then
        the partition heals.  A's held writes must be rejected (108) and
        never land, while the new host's and B's writes go on.
        """
        parts = partitions.Partitions('rbd-host-fence-%d' % os.getpid())
        self.addCleanup(parts.close)
        group = partitions.group_dir(parts.name, 'compute1')
        ids, writers, shared, att_b, b = self.host_a(
            singles=3, preexec_fn=partitions.joiner(group))
        singles = [v for v in ids if v != shared]

        parts.cut('compute1', self.cluster.public_ports())
        self.assert_held(list(writers.values()))
        b.wait_oks(5)
        held = {v: max(s for s, _t in w.oks()) + 1
                for v, w in writers.items()}

        report, returned = self.fence_a(ids)
        self.assertEqual({}, report.failed)
        self.assertEqual({v: [writers[v].addr] for v in ids}, report.done)
        self.assert_only_a_detached(ids, shared, att_b)
        successors = {}
        for i, vol_id in enumerate(singles):
            _att, info = self.attach(vol_id, 'compute2')
            successors[vol_id] = self.writer(
                info, 'compute2', tag='S%d' % i, base=SUCCESSOR_BASE)

        parts.heal('compute1')
        healed = time.time()
        for vol_id in ids:
            writer = writers[vol_id]
            self.assert_fenced_cleanly(writer, vol_id, returned,
                                       timeout=RECONNECT_WAIT)
            self.assertEqual(held[vol_id], writer.errs()[0][0])
            self.assertEqual(
                [b'\0' * BLOCK],
                self.read_blocks(vol_id, writer.base + held[vol_id], 1),
                'the write A held across the cut landed after its fence')
        for vol_id, successor in successors.items():
            successor.wait_oks(5)
            self.assertEqual([], successor.errs(), successor.lines[-8:])
            last = max(s for s, _t in successor.oks())
            self.assertEqual(
                [ceph.block_for(successor.tag, last)],
                self.read_blocks(vol_id, SUCCESSOR_BASE + last, 1))
        self.assert_b_writes_on(shared, b, healed)
        self.assertLessEqual({w.addr for w in writers.values()},
                             self.cluster.blocklist())

    def test_cluster_unreachable_changes_no_row(self):
        ids, writers, shared, att_b, b = self.host_a(singles=2)
        rows = self.rows(ids)
        mon = self.cluster.mon_pid()
        os.kill(mon, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            report, _returned = self.fence_a(ids)
            elapsed = time.monotonic() - t0
            # The OSD sessions are still up: A's clients still write.
            for writer in writers.values():
                writer.wait_oks(3)
        finally:
            os.kill(mon, signal.SIGCONT)
        self.assertEqual({}, report.done)
        self.assertEqual(set(ids), set(report.failed))
        for err in report.failed.values():
            self.assertIsInstance(err, fd_exception.ForceDetachFailed)
            self.assertIn('FenceClientsTask', str(err))
            self.assertIn('Ceph cluster unavailable', str(err))
        # one bounded wait for all (forcedetach_rbd_timeout = 10 s), not
        # one per volume
        self.assertLess(elapsed, 25)
        self.assertEqual(rows, self.rows(ids))
        for writer in list(writers.values()) + [b]:
            self.assertEqual([], writer.errs())
        # The flow's own teardown record (admin metadata, written before
        # anything is revoked) stays until a run completes: the only trace.
        for vol_id in ids:
            self.assertEqual([connector_for('compute1')['host']], [
                c['host'] for c in fd_attachments.hosts_in_teardown(
                    self.db_volume(vol_id))])

        # The monitor is back: the re-run fences and detaches.
        report, returned = self.fence_a(ids)
        self.assertEqual({}, report.failed)
        for vol_id in ids:
            self.assert_fenced_cleanly(writers[vol_id], vol_id, returned)
        self.assert_b_writes_on(shared, b, returned)
        self.assert_only_a_detached(ids, shared, att_b)

    def test_unexplained_client_fails_its_volume_only(self):
        """A's client on a volume B keeps, beside one nobody's.

        On the multiattach volume a client at 127.0.0.22 (neither A's nor
        B's address) holds the image: fencing it could cut B, sparing it
        could leave A writing.  That volume fails, with nothing fenced on
        it and its database untouched; A's other volume is fenced.
        """
        own_id = self.create_volume()['id']
        _att, info = self.attach(own_id, 'compute1')
        a_own = self.writer(info, 'compute1', tag='A')
        shared = self.create_volume(
            volume_type=self.multiattach_type())['id']
        _att_a, info_a = self.attach(shared, 'compute1')
        _att_b, _info_b = self.attach(shared, 'compute2')
        a_shared = self.writer(info_a, 'compute1', tag='AS')
        stray = self.writer(info_a, 'compute2', tag='X', base=20000,
                            bind_ip='127.0.0.22')
        rows = self.rows([shared])

        report, returned = self.fence_a([own_id, shared])

        self.assertEqual({own_id: [a_own.addr]}, report.done)
        self.assertEqual([shared], list(report.failed))
        err = str(report.failed[shared])
        self.assertIn('FenceClientsTask', err)
        self.assertIn(stray.addr, err)
        self.assertIn(fencing.UNEXPLAINED, err)
        self.assert_fenced_cleanly(a_own, own_id, returned)
        self.assert_detached(own_id)
        self.assertEqual(rows, self.rows([shared]))
        for writer in (a_shared, stray):
            writer.wait_oks(5)
            self.assertEqual([], writer.errs())
            self.assertNotIn(writer.addr, self.cluster.blocklist())

    def test_ip_wide_fence(self):
        """One ``IP:0/0`` entry cuts every client of the host at once."""
        ids, writers, shared, att_b, b = self.host_a(singles=2)
        entry = fencing.ip_entry(HOST_IPS['compute1'])
        self.addCleanup(self.driver.lift_fence, entry)
        before = self.cluster.blocklist()

        report, returned = self.fence_a(ids, ip_wide=True)

        self.assertEqual({}, report.failed)
        self.assertEqual({entry}, self.cluster.blocklist() - before)
        for vol_id in ids:
            self.assert_fenced_cleanly(writers[vol_id], vol_id, returned)
            self.assertEqual([(writers[vol_id].addr, entry, True)], [
                (f['addr'], f['entry'], f['active']) for f in
                self.driver.list_fences(self.db_volume(vol_id))])
        self.assert_b_writes_on(shared, b, returned)
        self.assert_only_a_detached(ids, shared, att_b)
        # the audit's view: no live holder of A's left anywhere
        self.assertEqual([], [
            h for h in self.driver.volume_holders(self.db_volume(shared))
            if h.connector['ip'] == HOST_IPS['compute1']])

        # Lifting one volume's fence lifts the host's entry (and every
        # record made with it): a new compute1 client works again.
        self.assertEqual([entry], self.driver.lift_fence(
            self.db_volume(ids[0])))
        self.assertNotIn(entry, self.cluster.blocklist())
        for vol_id in ids:
            self.assertEqual([], self.driver.list_fences(
                self.db_volume(vol_id)))
        _att, info = self.attach(ids[0], 'compute1')
        again = self.writer(info, 'compute1', tag='N', base=30000)
        again.wait_oks(3)
        self.assertEqual([], again.errs())

    def test_host_fence_cli(self):
        """The operator's ``cinder-forcedetach host fence compute1``.

        A dry run changes nothing; with the monitor stopped every volume
        fails (exit 4) and keeps its rows; once it is back the command
        fences A's writers, B's writes on; run again it finds nothing.
        """
        ids, writers, shared, att_b, b = self.host_a(singles=2)
        rows = self.rows(ids)

        def fence(*extra):
            res = self.local_cli('host', 'fence', 'compute1', *extra)
            self.assertNotIn(self.cluster.cinder_key, res.stdout + res.stderr)
            return res, {r['volume_id']: r for r in json.loads(res.stdout)}

        res, planned = fence('--dry-run')
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertEqual({v: 'planned' for v in ids},
                         {v: r['result'] for v, r in planned.items()})
        self.assertEqual(rows, self.rows(ids))

        mon = self.cluster.mon_pid()
        os.kill(mon, signal.SIGSTOP)
        try:
            res, failed = fence()
        finally:
            os.kill(mon, signal.SIGCONT)
        self.assertEqual(4, res.returncode, res.stderr)
        self.assertEqual({v: 'failed' for v in ids},
                         {v: r['result'] for v, r in failed.items()})
        self.assertIn('Ceph cluster unavailable', failed[ids[0]]['error'])
        self.assertEqual(rows, self.rows(ids))
        for writer in list(writers.values()) + [b]:
            self.assertEqual([], writer.errs())

        res, fenced = fence()
        returned = time.time()
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertEqual({v: ('fenced', [writers[v].addr]) for v in ids},
                         {v: (r['result'], r['fenced'])
                          for v, r in fenced.items()})
        for vol_id in ids:
            self.assert_fenced_cleanly(writers[vol_id], vol_id, returned)
        self.assert_b_writes_on(shared, b, returned)
        self.assert_only_a_detached(ids, shared, att_b)

        res, again = fence()
        self.assertEqual((0, {}), (res.returncode, again), res.stderr)
