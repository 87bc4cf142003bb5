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

"""The history checker on histories written by hand."""

import os

import fixtures
import testtools

from tests.support import history

V = 'vol-1'


def attach(host, start, end, outcome='ok', volume=V, att=None):
    return {'type': 'op', 'kind': 'attach', 'host': host, 'volume': volume,
            'start': start, 'end': end, 'outcome': outcome,
            'attachment': att}


def observe(time_, hosts, status='in-use', target=True, settled=True,
            volume=V):
    return {'type': 'observe', 'volume': volume, 'time': time_,
            'status': status, 'hosts': hosts, 'target': target,
            'acls': [], 'settled': settled}


def write(host, slot, start, end, volume=V):
    return {'type': 'write', 'host': host, 'volume': volume, 'slot': slot,
            'start': start, 'end': end, 'outcome': 'ok'}


class LateWriteTestCase(testtools.TestCase):

    def kinds(self, events, landed, multiattach=False):
        return [v.kind for v in history.late_writes(
            events, {V: landed}, {V: multiattach})]

    def test_a_write_begun_after_the_cut_must_not_land(self):
        events = [attach('h1', 0, 1), write('h1', 0, 2, 2.1),
                  observe(5, []), write('h1', 1, 6, 6.1)]
        landed = {0: 'h1', 1: 'h1'}
        self.assertEqual(['late_write'], self.kinds(events, landed))
        # Refused (not on the volume): the cut held.
        self.assertEqual([], self.kinds(events, {0: 'h1'}))

    def test_a_write_in_flight_at_the_cut_may_land(self):
        events = [attach('h1', 0, 1), write('h1', 0, 4, 6), observe(5, [])]
        self.assertEqual([], self.kinds(events, {0: 'h1'}))

    def test_the_host_granted_again_may_land(self):
        events = [attach('h1', 0, 1), observe(5, []),
                  attach('h1', 7, 8), write('h1', 0, 6, 9)]
        self.assertEqual([], self.kinds(events, {0: 'h1'}))
        # A grant in doubt (its service killed) may have happened.
        events[2] = attach('h1', 7, 8, outcome='info')
        events[3] = write('h1', 0, 9, 10)
        self.assertEqual([], self.kinds(events, {0: 'h1'}))
        # One that ended before the cut does not.
        events[2] = attach('h1', 3, 4)
        self.assertEqual(['late_write'], self.kinds(events, {0: 'h1'}))

    def test_another_hosts_grant_cuts_on_a_volume_not_multiattach(self):
        # h1's status-only reset left it attached; h2 was granted.
        events = [attach('h1', 0, 1), observe(2, ['h1']),
                  attach('h2', 3, 4), write('h1', 0, 5, 5.1),
                  write('h2', 1, 5, 5.1)]
        landed = {0: 'h1', 1: 'h2'}
        self.assertEqual(['second_writer'], self.kinds(events, landed))
        self.assertEqual([], self.kinds(events, landed, multiattach=True))

    def test_two_attaches_in_flight_together_are_not_judged(self):
        """Which grant came last (and cut the other) is not known.

        A clean-clone run: Cinder let two attachments in on a volume
        that is not multiattach (its os-force_detach set a stale
        ``available`` over a reservation); h2's attach ended first, yet
        h2 wrote on: h1's grant had come first, and h2's cut h1.
        """
        events = [attach('h1', 0, 5), attach('h2', 3, 4.9),
                  write('h2', 1, 6, 6.1)]
        self.assertEqual([], self.kinds(events, {1: 'h2'}))
        # h2's attach ended before h1's began: h1's grant came last.
        events[1] = attach('h2', -2, -1)
        self.assertEqual(['second_writer'], self.kinds(events, {1: 'h2'}))

    def test_only_the_writer_of_the_slot_counts(self):
        events = [attach('h1', 0, 1), observe(5, []),
                  write('h1', 0, 6, 6.1)]
        self.assertEqual([], self.kinds(events, {0: 'h2'}))


class ObservationTestCase(testtools.TestCase):

    def test_available_with_a_target_when_settled(self):
        events = [observe(1, [], status='available', target=True),
                  observe(2, [], status='available', target=True,
                          settled=False),
                  observe(3, [], status='available', target=False)]
        found = history.exported_while_available(events)
        self.assertEqual(['available_exported'], [v.kind for v in found])
        self.assertIn('at 1.000', found[0].detail)

    def test_the_operators_reset_until_our_next_operation(self):
        reset = {'type': 'op', 'kind': 'reset_status', 'volume': V,
                 'start': 1, 'end': 2, 'outcome': 'ok'}
        events = [reset, observe(3, ['h1'], status='available')]
        self.assertEqual([], history.exported_while_available(events))
        events += [attach('h2', 4, 5),
                   observe(6, ['h1'], status='available')]
        self.assertEqual(['available_exported'], [
            v.kind for v in history.exported_while_available(events)])


class AttachmentsTestCase(testtools.TestCase):

    def test_lost_unless_something_could_have_ended_it(self):
        events = [attach('h1', 0, 1, att='a1'), attach('h2', 0, 1, att='a2'),
                  attach('h3', 0, 1, att='a3', outcome='fail')]
        found = history.attachments(events, {V: ['a2']})
        self.assertEqual([('attachment_lost', V)],
                         [(v.kind, v.volume) for v in found])
        self.assertIn('a1', found[0].detail)
        events.append({'type': 'op', 'kind': 'force_detach', 'volume': V,
                       'start': 2, 'end': 3, 'outcome': 'info'})
        self.assertEqual([], history.attachments(events, {V: ['a2']}))

    def test_unknown_at_the_end(self):
        found = history.attachments([], {V: ['zz']})
        self.assertEqual(['attachment_unknown'], [v.kind for v in found])


class HistoryTestCase(testtools.TestCase):

    def test_outcomes_of_an_operation(self):
        h = history.History()
        with h.op('attach', V, host='h1') as op:
            op['attachment'] = 'a1'
        with h.op('delete_attachment', V) as op:
            op['outcome'] = 'fail'
        self.assertRaises(RuntimeError, self._raise_in, h)
        self.assertEqual([('attach', 'ok'), ('delete_attachment', 'fail'),
                          ('force_detach', 'info')],
                         [(e['kind'], e['outcome']) for e in h.events])
        self.assertTrue(all(e['end'] >= e['start'] for e in h.events))
        self.assertEqual('a1', h.events[0]['attachment'])
        self.assertEqual([None, None, 'RuntimeError: killed'],
                         [e.get('error') for e in h.events])

    @staticmethod
    def _raise_in(h):
        with h.op('force_detach', V):
            raise RuntimeError('killed')

    def test_dump_and_load(self):
        h = history.History()
        h.write('h1', V, 3, 1.0, 2.0, 'ok')
        h.observe(V, 2.5, 'available', [], False, [], True)
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'h')
        h.dump(path)
        self.assertEqual(h.events, history.load(path))

    def test_check_gathers_every_kind(self):
        events = [attach('h1', 0, 1, att='a1'), observe(5, []),
                  write('h1', 0, 6, 6.1),
                  observe(7, [], status='available', target=True)]
        found = history.check(events, {V: {0: 'h1'}}, {V: False}, {V: []})
        self.assertEqual(['late_write', 'available_exported',
                          'attachment_lost'], [v.kind for v in found])
