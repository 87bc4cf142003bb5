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

"""Who gets fenced: client addresses, connectors, kept attachments."""

import contextlib
import datetime

import ddt
import fixtures
import testtools

from cinder_forcedetach.ceph import fencing

A = {'host': 'compute1', 'ip': '127.0.0.11'}
B = {'host': 'compute2', 'ip': '127.0.0.12'}
ADDR_A = '127.0.0.11:0/1001'
ADDR_A2 = '127.0.0.11:0/1002'
ADDR_B = '127.0.0.12:0/2001'
ADDR_B2 = '127.0.0.22:0/2002'      # compute2's other address
ADDR_X = '127.0.0.99:0/9001'       # nobody's
OWN = '127.0.0.1:0/3001'


def no_dns(name):
    return []


@ddt.ddt
class SelectFenceTargetsTestCase(testtools.TestCase):

    def select(self, holders, connectors, keep=(), own=(OWN,),
               resolve=no_dns):
        return fencing.select_fence_targets(holders, own, connectors,
                                            keep, resolve=resolve)

    def unexplained(self, *args, **kwargs):
        """The holders the selection refuses to decide on."""
        try:
            result = self.select(*args, **kwargs)
        except fencing.UnexplainedClients as err:
            return err.clients
        self.fail('no error; selected %s' % (result,))

    def test_every_host_but_never_ourselves(self):
        targets, spared = self.select([ADDR_A, ADDR_B, OWN], [None])
        self.assertEqual([ADDR_A, ADDR_B], targets)
        self.assertEqual([(OWN, 'this driver')], spared)

    def test_no_attachment_stays_every_other_holder_is_fenced(self):
        """Nothing in Cinder explains any client: whatever its IP."""
        targets, spared = self.select(
            [ADDR_A, ADDR_B, ADDR_A2, ADDR_X, OWN], [A])
        self.assertEqual(sorted([ADDR_A, ADDR_A2, ADDR_B, ADDR_X]), targets)
        self.assertEqual([(OWN, 'this driver')], spared)

    def test_multiattach_keeps_the_attachment_that_stays(self):
        for connectors in ([A], [None]):
            targets, spared = self.select([ADDR_A, ADDR_B, OWN], connectors,
                                          keep=[B])
            self.assertEqual([ADDR_A], targets)
            self.assertEqual({(ADDR_B, 'an attachment that stays'),
                              (OWN, 'this driver')}, set(spared))

    def test_unexplained_client_fails(self):
        """compute2's client at an address its connector does not name."""
        clients = self.unexplained([ADDR_A, ADDR_B, ADDR_B2, OWN], [A],
                                   keep=[B])
        self.assertEqual([(ADDR_B2, fencing.UNEXPLAINED)], clients)

    def test_ambiguous_client_fails(self):
        """Two hosts claim one IP: fencing or sparing could be wrong."""
        twin = {'host': 'compute3', 'ip': '127.0.0.11'}
        clients = self.unexplained([ADDR_A, OWN], [A], keep=[twin])
        self.assertEqual([(ADDR_A, fencing.AMBIGUOUS)], clients)

    def test_attachment_without_connector_explains_nothing(self):
        """A kept attachment with no connector (legacy attach)."""
        clients = self.unexplained([ADDR_A, ADDR_B], [A], keep=[None])
        self.assertEqual([(ADDR_B, fencing.UNEXPLAINED)], clients)
        # and a detached one without connector explains nothing either
        clients = self.unexplained([ADDR_A, ADDR_B], [], keep=[B])
        self.assertEqual([(ADDR_A, fencing.UNEXPLAINED)], clients)

    def test_host_keeping_another_attachment_is_not_detached(self):
        """Two attachments from one host: keeping one keeps its access."""
        targets, spared = self.select([ADDR_A], [A], keep=[dict(A)])
        self.assertEqual([], targets)
        self.assertEqual([(ADDR_A, 'an attachment that stays')], spared)

    def test_host_names_resolve_to_every_address(self):
        dns = {'compute1': ['127.0.0.11', '127.0.0.21'],
               'compute2': ['127.0.0.12', '127.0.0.22']}.get
        addr_a3 = '127.0.0.21:0/1003'
        targets, spared = self.select([ADDR_A, addr_a3, ADDR_B2, OWN], [A],
                                      keep=[B], resolve=dns)
        self.assertEqual([ADDR_A, addr_a3], targets)
        self.assertEqual({(ADDR_B2, 'an attachment that stays'),
                          (OWN, 'this driver')}, set(spared))

    @ddt.data('v1:127.0.0.11:0/1001', '[v1:127.0.0.11:0/1001]',
              'any:127.0.0.11:0/1001', ' 127.0.0.11:0/1001 ')
    def test_address_forms_and_duplicates(self, form):
        targets, _spared = self.select([form, ADDR_A], [A], keep=[B])
        self.assertEqual([ADDR_A], targets)

    def test_nothing_holds_it(self):
        self.assertEqual(([], []), self.select([], [A], keep=[B]))

    def test_connector_ips(self):
        def dns(name):
            return {'compute1': ['127.0.0.21', '::1']}.get(name, [])
        self.assertEqual({'127.0.0.12'},
                         fencing.connector_ips({'host': '127.0.0.12'},
                                               resolve=self.fail))
        self.assertEqual({'127.0.0.11', '127.0.0.21', '::1'},
                         fencing.connector_ips(A, resolve=dns))
        self.assertEqual({'127.0.0.21', '::1'},
                         fencing.connector_ips({'host': 'compute1'},
                                               resolve=dns))
        self.assertEqual({'127.0.0.12'},
                         fencing.connector_ips(B, resolve=dns))
        self.assertEqual(set(), fencing.connector_ips(None))

    def test_unexplained_error_names_the_client_and_the_way_out(self):
        err = fencing.UnexplainedClients(
            [(ADDR_B2, fencing.UNEXPLAINED)])
        reason = fencing._unexplained(err, [
            ('watcher', ADDR_B2), ('lock owner', 'v1:' + ADDR_B2),
            ('watcher', ADDR_A)])
        self.assertIn('client %s (lock owner, watcher)' % ADDR_B2, reason)
        self.assertIn(fencing.UNEXPLAINED, reason)
        self.assertNotIn(ADDR_A, reason)
        self.assertIn('nothing was fenced', reason)
        self.assertIn('without a connector', reason)
        self.assertIn('refresh', reason)


@ddt.ddt
class AddressTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(('127.0.0.11:0/99', '127.0.0.11'),
              ('v2:10.0.0.1:6800/5', '10.0.0.1'),
              ('[::1]:0/5', '::1'),
              ('[v1:[fd00::2]:0/7]', 'fd00::2'))
    def test_addr_ip(self, addr, ip):
        self.assertEqual(ip, fencing.addr_ip(addr))


# -- a host fence -------------------------------------------------------------

V1, V2, V3 = 'vol-1', 'vol-2', 'vol-3'


class HoldersFromTestCase(testtools.TestCase):

    def test_watchers_lock_owner_and_advisory_lockers(self):
        holders = fencing.holders_from(
            [{'addr': ADDR_A, 'id': 1, 'cookie': 5}],
            {'tag': 'internal', 'exclusive': True,
             'lockers': [('client.1', 'auto 140000', ADDR_A)]})
        self.assertEqual([('watcher', ADDR_A), ('lock owner', ADDR_A)],
                         holders)
        holders = fencing.holders_from([], {
            'tag': '', 'exclusive': False,
            'lockers': [('client.2', 'mine', ADDR_B)]})
        self.assertEqual([('locker', ADDR_B)], holders)

    def test_nothing_holds_it(self):
        # librbd's list_lockers() gives [] (not a dict) with no locker
        self.assertEqual([], fencing.holders_from([], []))
        self.assertEqual([], fencing.holders_from(None, None))


@ddt.ddt
class IPEntryTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(('127.0.0.11', '127.0.0.11:0/0'),
              ('fd00::2', '[fd00::2]:0/0'),
              ('::1', '[::1]:0/0'))
    def test_ip_entry(self, ip, entry):
        self.assertEqual(entry, fencing.ip_entry(ip))

    def test_not_an_ip(self):
        self.assertRaises(ValueError, fencing.ip_entry, 'compute1')
        self.assertIsNone(fencing._ip_entry_of('compute1:0/5'))
        self.assertEqual('127.0.0.11:0/0', fencing._ip_entry_of(ADDR_A))

    def test_record_entry(self):
        self.assertEqual(ADDR_A, fencing._entry({'addr': ADDR_A}))
        self.assertEqual('127.0.0.11:0/0', fencing._entry(
            {'addr': ADDR_A, 'entry': '127.0.0.11:0/0'}))


class MemoizedTestCase(testtools.TestCase):

    def test_each_name_is_resolved_once(self):
        asked = []

        def dns(name):
            asked.append(name)
            return ['127.0.0.21']
        resolve = fencing.memoized(dns)
        for _ in range(3):
            self.assertEqual(['127.0.0.21'], resolve('compute1'))
        self.assertEqual(['127.0.0.21'], resolve('compute2'))
        self.assertEqual(['compute1', 'compute2'], asked)


class SelectHostTargetsTestCase(testtools.TestCase):

    def select(self, holders, keep=None, own=(OWN,), resolve=no_dns):
        return fencing.select_host_targets(holders, own, A, keep or {},
                                           resolve=resolve)

    def test_each_volume_gets_its_host_clients(self):
        targets, failed, spared = self.select(
            {V1: [ADDR_A, OWN], V2: [ADDR_A2, ADDR_A2], V3: []})
        self.assertEqual({V1: [ADDR_A], V2: [ADDR_A2], V3: []}, targets)
        self.assertEqual({}, failed)
        self.assertEqual([(OWN, 'this driver')], spared[V1])

    def test_another_host_that_stays_is_never_fenced(self):
        targets, failed, spared = self.select(
            {V1: [ADDR_A, ADDR_B], V2: [ADDR_A2]}, keep={V1: [B]})
        self.assertEqual({V1: [ADDR_A], V2: [ADDR_A2]}, targets)
        self.assertEqual({}, failed)
        self.assertEqual([(ADDR_B, 'an attachment that stays')], spared[V1])

    def test_no_attachment_stays_every_other_holder_is_fenced(self):
        """select_fence_targets' rule, volume by volume."""
        targets, failed, _spared = self.select({V1: [ADDR_A, ADDR_X]})
        self.assertEqual({V1: [ADDR_A, ADDR_X]}, targets)

    def test_unexplained_clients_fail_their_volume_only(self):
        targets, failed, _spared = self.select(
            {V1: [ADDR_A, ADDR_B2], V2: [ADDR_A2]}, keep={V1: [B]})
        self.assertEqual({V2: [ADDR_A2]}, targets)
        self.assertEqual({V1: [(ADDR_B2, fencing.UNEXPLAINED)]}, failed)

    def test_ambiguous_client_fails_its_volume_only(self):
        twin = {'host': 'compute3', 'ip': '127.0.0.11'}
        targets, failed, _spared = self.select(
            {V1: [ADDR_A], V2: [ADDR_A2]}, keep={V1: [twin]})
        self.assertEqual({V2: [ADDR_A2]}, targets)
        self.assertEqual({V1: [(ADDR_A, fencing.AMBIGUOUS)]}, failed)

    def test_client_another_volume_keeps_is_not_fenced(self):
        """One client instance holds two images; one's attachment stays.

        V1 has no attachment left, so its rule fences every holder; but
        compute2's client also holds V2 for an attachment that stays:
        blocklisting it would cut V2 too.  V1 fails, V2 is untouched.
        """
        targets, failed, _spared = self.select(
            {V1: [ADDR_A, ADDR_B], V2: [ADDR_B], V3: [ADDR_A2]},
            keep={V2: [B]})
        self.assertEqual({V2: [], V3: [ADDR_A2]}, targets)
        self.assertEqual({V1: [(ADDR_B, fencing.KEPT_ELSEWHERE % V2)]},
                         failed)

    def test_host_names_are_resolved_once(self):
        asked = []

        def dns(name):
            asked.append(name)
            return []
        self.select({vid: [ADDR_A] for vid in (V1, V2, V3)},
                    keep={V1: [B], V2: [B], V3: [B]}, resolve=dns)
        self.assertEqual(['compute1', 'compute2'], sorted(set(asked)))
        self.assertEqual(len(set(asked)), len(asked))


class BlocklistEntriesTestCase(testtools.TestCase):

    TARGETS = {V1: [ADDR_A, ADDR_X], V2: [ADDR_A2, ADDR_A]}

    def test_one_entry_per_client_address(self):
        entries = fencing.blocklist_entries(self.TARGETS, {'127.0.0.11'})
        self.assertEqual({ADDR_A: ADDR_A, ADDR_A2: ADDR_A2,
                          ADDR_X: ADDR_X}, entries)

    def test_ip_wide_for_the_host_ips_only(self):
        entries = fencing.blocklist_entries(self.TARGETS, {'127.0.0.11'},
                                            ip_wide=True, own_addrs=[OWN])
        self.assertEqual({ADDR_A: '127.0.0.11:0/0',
                          ADDR_A2: '127.0.0.11:0/0', ADDR_X: ADDR_X},
                         entries)
        self.assertEqual({'127.0.0.11:0/0', ADDR_X}, set(entries.values()))

    def test_never_ip_wide_on_a_kept_ip_or_our_own(self):
        for keep_ips, own in (({'127.0.0.11'}, [OWN]),
                              ((), ['127.0.0.11:0/3001'])):
            entries = fencing.blocklist_entries(
                self.TARGETS, {'127.0.0.11'}, ip_wide=True,
                keep_ips=keep_ips, own_addrs=own)
            self.assertEqual({ADDR_A: ADDR_A, ADDR_A2: ADDR_A2,
                              ADDR_X: ADDR_X}, entries)


class InThreadsTestCase(testtools.TestCase):

    def test_results_in_order_and_errors_apart(self):
        def func(i):
            if i % 3 == 0:
                raise ValueError(i)
            return i * 2
        for workers in (1, 4, 50):
            results = fencing.in_threads(func, range(10), workers)
            self.assertEqual([None if i % 3 == 0 else i * 2
                              for i in range(10)],
                             [r for r, _e in results])
            self.assertEqual([i for i in range(10) if i % 3 == 0],
                             [e.args[0] for _r, e in results if e])

    def test_in_native_threads_at_once(self):
        threading_ = fencing.native_threading()
        barrier = threading_.Barrier(4, timeout=10)
        results = fencing.in_threads(lambda i: barrier.wait() >= 0,
                                     range(4), 4)
        self.assertEqual([(True, None)] * 4, results)

    def test_nothing_to_do(self):
        self.assertEqual([], fencing.in_threads(self.fail, [], 8))


class CountActiveTestCase(testtools.TestCase):
    """The fence records the pool capabilities count: one omap read."""

    def test_expired_records_are_not_counted(self):
        now = datetime.datetime(2026, 11, 27, 12, 0, 0)
        records = {
            'v1/a': {'expires_at': '2026-11-28T12:00:00'},
            'v1/b': {'expires_at': '2026-11-27T11:59:59'},
            'v2/c': {'expires_at': '2026-11-27T13:00:00+00:00'},
            'v3/d': {'addr': 'no expiry recorded'},
        }
        reads = []

        @contextlib.contextmanager
        def connect(access, pool):
            yield 'client', 'ioctx'

        def read_records(ioctx, prefix=''):
            reads.append((ioctx, prefix))
            return records

        self.useFixture(fixtures.MockPatchObject(fencing.cluster, 'connect',
                                                 connect))
        self.useFixture(fixtures.MockPatchObject(
            fencing.Fencing, '_read_records', staticmethod(read_records)))
        fences = fencing.Fencing(None, 'volumes', 86400, 10.0)
        self.assertEqual(3, fences.count_active(now))
        self.assertEqual([('ioctx', '')], reads)
