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

"""A compute host partitioned from the storage network, then healed.

The host is alive and cut off (a failed switch port, not a crash): its
initiator's write hangs, pending in libiscsi, and it will retry it, and
log in again, as soon as the network comes back.  That is the case a
database reset gets wrong: nothing on the storage side looks held, and the
hung host resumes writing the volume its successor now owns.

Nodes are network namespaces this test creates (:mod:`devbox.netns`):
tgtd on a storage node, each compute host's qemu-io (libiscsi) initiator
on a node of its own, every one with its own address on one switch.
Cinder's services run in this process; they reach tgtd through its
control socket (a file), as the volume service reaches a local tgtd.
"""

import json
import time

from devbox import netns
from tests.functional import base
from tests.support import cutoff
from tests.support import tgtd as tgtd_daemon

BLOCK = cutoff.BLOCK
#: Where the partitioned host's hung write goes; its successor's goes next.
HUNG, SUCCESSOR = 8 * BLOCK, 16 * BLOCK
#: libiscsi's reconnect after a heal: a few seconds here; wait well past.
RECONNECT_WAIT = 20


class TgtPartitionTestCase(base.CinderTgtTestCase):

    HOSTS = ('h1', 'h2')

    def make_tgtd(self):
        self.lab = netns.Lab()
        self.addCleanup(self.lab.close)
        storage = self.lab.add('storage')
        for host in self.HOSTS:
            self.lab.add(host)
        return self.useFixture(tgtd_daemon.TgtdFixture(
            address=storage.address,
            prefix=self.lab.prefix('storage'))).tgtd

    def host_prefix(self, host):
        return self.lab.prefix(host)

    def connector(self, host):
        """As os-brick builds it on *host*: the node's own address."""
        connector = super(TgtPartitionTestCase, self).connector(host)
        return dict(connector, ip=self.lab.nodes[host].address)

    def hung_write(self, session, pattern, offset):
        """A write of the partitioned host: no answer, still pending."""
        outcome = session.try_write(pattern, offset, timeout=3)
        self.assertEqual(cutoff.Outcome.TIMED_OUT, outcome.kind,
                         'a partitioned host got an answer: %s' % outcome)
        return outcome

    def force_detach(self, volume_id):
        start = time.monotonic()
        self.api.api_post('/volumes/%s/action' % volume_id,
                          {'os-force_detach': {}},
                          check_response_status=[202])
        print('force-detach of a partitioned host: %.1f s' % (
            time.monotonic() - start))

    def assert_stays_cut(self, sessions):
        """After the heal: no hung write lands, a new one is refused.

        *sessions*: ``{volume_id: h1's session}``.  libiscsi reconnects
        within seconds of the heal and retries the hung write;
        :data:`RECONNECT_WAIT` is well past that.
        """
        self.lab.heal('h1')
        time.sleep(RECONNECT_WAIT)
        for volume_id, session in sessions.items():
            self.assertFalse(
                b'\xa1' in self.backing_block(volume_id, HUNG),
                'the partitioned host\'s hung write landed on %s' %
                volume_id)
            cutoff.assert_refused(
                self, session.try_write(0xa7, HUNG, timeout=3,
                                        refusal_wait=35),
                'h1 on %s after the heal' % volume_id)
            self.assertFalse(
                b'\xa7' in self.backing_block(volume_id, HUNG),
                'the partitioned host wrote on %s after the heal' %
                volume_id)

    def attached_hosts(self, volume_id):
        return [a['host_name']
                for a in self.api.get_volume(volume_id)['attachments']]

    def partitioned_writer(self, volume_id):
        """h1 attached and writing, then partitioned with a write hung."""
        att, info = self.attach(volume_id, 'h1')
        session = self.login(info, 'h1')
        self.lab.partition('h1')
        self.addCleanup(self.lab.heal, 'h1')
        self.hung_write(session, 0xa1, HUNG)
        return att, session

    def test_force_detach_of_a_partitioned_host_holds_after_heal(self):
        """os-force_detach while the host is cut off; its write never lands.

        h1 attached and writing; h1 partitioned, its next write hangs;
        the operator's force-detach (Cinder's API, no connector) ends it
        on the backend and in Cinder without reaching h1.  The network
        heals while the volume is ``available``: h1's libiscsi reconnects
        and retries the hung write; refused, and the block never holds
        it.  Then h2 attaches and writes, and h1 is still refused.
        """
        volume_id = self.create_volume()['id']
        _att, h1 = self.partitioned_writer(volume_id)
        self.force_detach(volume_id)
        self.wait_volume(volume_id, ('available',))
        self.assert_detached(volume_id)
        self.assert_stays_cut({volume_id: h1})
        self.assertIsNone(self.target_state(volume_id),
                          'the target outlived the force-detach')

        _att, info = self.attach(volume_id, 'h2')
        h2 = self.login(info, 'h2')
        self.assertEqual(cutoff.Outcome.WROTE,
                         h2.try_write(0xb2, SUCCESSOR).kind)
        cutoff.assert_refused(self, h1.try_write(0xa7, HUNG, timeout=3,
                                                 refusal_wait=35),
                              'h1 once h2 is attached')
        self.assertEqual(b'\xb2' * BLOCK,
                         self.backing_block(volume_id, SUCCESSOR))

    def test_one_host_of_a_multiattach_volume_partitioned(self):
        """The operator ends the partitioned host's attachment; h2 writes on.

        A multiattach volume on h1 and h2, h1 partitioned with a write
        hung; h1's attachment deleted (Cinder refuses an os-force_detach
        of a volume with several attachments, bug #2004555's guard; the
        CLI deletes the attachment instead).  The export stays (h2 uses
        it), so only the revoke of h1's access keeps h1 off after the
        heal.
        """
        volume_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        _att, info = self.attach(volume_id, 'h2')
        h2 = self.login(info, 'h2')
        att, h1 = self.partitioned_writer(volume_id)
        self.api.api_delete('/attachments/%s' % att['id'])
        self.wait_volume(volume_id, ('in-use',))
        self.assertEqual(['h2'], self.attached_hosts(volume_id))
        self.assert_stays_cut({volume_id: h1})
        self.assertEqual(cutoff.Outcome.WROTE,
                         h2.try_write(0xb2, SUCCESSOR).kind,
                         'h2 lost the volume when h1 came back')
        state = self.target_state(volume_id)
        self.assertEqual([base.initiator_name('h2')], state.acls)

    def test_second_host_granted_while_the_first_is_partitioned(self):
        """The operator's status-only reset, then another host's attach.

        Horizon's "Update Volume Status" with h1 partitioned: Cinder has
        forgotten nothing but says ``available``; h2's attach meets our
        grant fence, which cuts h1 without reaching it.  After the heal,
        h1's hung write is refused and never lands.
        """
        volume_id = self.create_volume()['id']
        _att, h1 = self.partitioned_writer(volume_id)
        self.api.api_post('/volumes/%s/action' % volume_id,
                          {'os-reset_status': {'status': 'available'}},
                          check_response_status=[202])

        _att, info = self.attach(volume_id, 'h2')
        h2 = self.login(info, 'h2')

        self.assert_stays_cut({volume_id: h1})
        self.assertEqual(cutoff.Outcome.WROTE,
                         h2.try_write(0xb2, SUCCESSOR).kind)
        state = self.target_state(volume_id)
        self.assertNotIn(base.initiator_name('h1'), state.acls)
        self.assertEqual([base.initiator_name('h2')],
                         [s.initiator for s in state.sessions])

    def test_host_fence_of_a_partitioned_host(self):
        """``cinder-forcedetach host fence h1`` with h1 cut off, writing.

        h1 holds three volumes (the third multiattach, h2 writing it too),
        a write hung on each; the operator's host fence, on this volume
        host: every volume of h1 through the force-detach flow, h1's
        attachments ended in Cinder, h2's kept.  After the heal no hung
        write lands, h1 is refused on each, h2 writes on.  Run again, the
        fence finds nothing.
        """
        shared = self.create_volume(
            volume_type=self.multiattach_type())['id']
        _att, info = self.attach(shared, 'h2')
        h2 = self.login(info, 'h2')
        volumes = [self.create_volume()['id'] for _ in range(2)] + [shared]
        sessions = {}
        for volume_id in volumes:
            _att, info = self.attach(volume_id, 'h1')
            sessions[volume_id] = self.login(info, 'h1')
        self.lab.partition('h1')
        self.addCleanup(self.lab.heal, 'h1')
        for session in sessions.values():
            self.hung_write(session, 0xa1, HUNG)

        start = time.monotonic()
        res = self.local_cli('host', 'fence', 'h1')
        print('host fence of a partitioned host, %d volumes: %.1f s' % (
            len(volumes), time.monotonic() - start))
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertEqual({v: 'fenced' for v in volumes},
                         {r['volume_id']: r['result']
                          for r in json.loads(res.stdout)})
        for volume_id in volumes[:2]:
            self.assert_detached(volume_id)
        self.assertEqual(['h2'], self.attached_hosts(shared))

        self.assert_stays_cut(sessions)
        self.assertEqual(cutoff.Outcome.WROTE,
                         h2.try_write(0xb2, SUCCESSOR).kind,
                         'the host fence cut h2')

        res = self.local_cli('host', 'fence', 'h1')
        self.assertEqual((0, []), (res.returncode, json.loads(res.stdout)),
                         res.stderr)
