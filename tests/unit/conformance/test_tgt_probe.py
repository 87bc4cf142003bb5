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

"""TgtProbe's own reading of tgtd, on listings captured from a real tgtd.

The samples in ``tgtadm/`` are ``tgtadm --lld iscsi --op show --mode
target`` as tgtd 1.0.85 (Debian 12) printed it (tests/functional/fixtures.py
Tgtd; live sessions of qemu-io/libiscsi initiators), only the backing store
directory rewritten:

* ``empty``: no target; ``bare_target``: a target with no LUN 1 yet;
* ``acl_no_session``: LUN 1, a CHAP account, ACL entries of host1 and
  host2, no session;
* ``two_sessions``: the same with both hosts logged in;
* ``session_without_acl``: host1's entry unbound, its session still there;
* ``address_rules``: plus target 2 with ``ALL`` and a network;
* ``offline``: target 1 taken offline (sessions still listed);
* ``after_close``: the initiators logged out.
"""

import inspect
import os
import subprocess

import fixtures
import testtools

from cinder_forcedetach.conformance import probe
from cinder_forcedetach.targets import tgtadm

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tgtadm')
VOLUMES = '/var/lib/cinder-forcedetach/volumes/'
IQN = 'iqn.2026-11.org.cinder-forcedetach.conformance:conformance-host%d'
HOST1, HOST2, HOST3 = IQN % 1, IQN % 2, IQN % 3
TARGET_A = 'iqn.2010-10.org.openstack:volume-aaaa'
TARGET_B = 'iqn.2010-10.org.openstack:volume-bbbb'


def sample(name):
    with open(os.path.join(SAMPLES, name + '.txt')) as f:
        return f.read()


class Volume(object):
    def __init__(self, name):
        self.name = name


class Conf(object):
    forcedetach_tgt_control_port = 3261


class ForgedTarget(object):
    """The driver's own reading: tgtadm.parse_targets, forged to hide host1."""

    def __init__(self, listing):
        self.listing = listing
        self.control_port = 9999

    def find(self, name):
        state = tgtadm.parse_targets(self.listing, only=name).get(name)
        if state is not None:
            state.acls = [a for a in state.acls if a != HOST1]
            state.sessions = [s for s in state.sessions
                              if s.initiator != HOST1]
        return state


class Driver(object):
    """What TgtProbe asks of a driver: naming, its file, its options."""

    configuration = Conf()

    def __init__(self, listing=''):
        self.target = ForgedTarget(listing)

    def target_name(self, volume):
        return 'iqn.2010-10.org.openstack:' + volume.name

    def local_path(self, volume):
        # volume-aaaa's file is vol-a (as in the samples).
        return VOLUMES + 'vol-' + volume.name[len('volume-'):][:1]


def connector(iqn):
    return {'host': 'h', 'initiator': iqn}


class ReadListingTestCase(testtools.TestCase):

    def read(self, name):
        return {t.name: t for t in probe.read_tgt_listing(sample(name))}

    def test_empty(self):
        self.assertEqual({}, self.read('empty'))

    def test_bare_target(self):
        target = self.read('bare_target')[TARGET_A]
        self.assertEqual((1, 'ready', [], {'0': 'None'}, [], []),
                         (target.tid, target.state, target.sessions,
                          target.luns, target.accounts, target.acls))

    def test_acl_entries_lun_and_account(self):
        target = self.read('acl_no_session')[TARGET_A]
        self.assertEqual([HOST1, HOST2], target.acls)
        self.assertEqual([], target.sessions)
        self.assertEqual({'0': 'None', '1': VOLUMES + 'vol-a'}, target.luns)
        self.assertEqual(['chapuser1'], target.accounts)

    def test_sessions(self):
        target = self.read('two_sessions')[TARGET_A]
        self.assertEqual([HOST1 + ' alias: none', HOST2 + ' alias: none'],
                         target.sessions)
        self.assertEqual([HOST1, HOST2], target.acls)
        target = self.read('session_without_acl')[TARGET_A]
        self.assertEqual(2, len(target.sessions))
        self.assertEqual([HOST2], target.acls)

    def test_two_targets_and_address_rules(self):
        targets = self.read('address_rules')
        self.assertEqual([1, 2], [targets[TARGET_A].tid,
                                  targets[TARGET_B].tid])
        self.assertEqual([HOST2], targets[TARGET_A].acls)
        self.assertEqual(['ALL', '192.168.0.0/24'], targets[TARGET_B].acls)
        self.assertEqual([], targets[TARGET_B].accounts)
        self.assertEqual(VOLUMES + 'vol-b', targets[TARGET_B].luns['1'])

    def test_offline_and_closed(self):
        target = self.read('offline')[TARGET_A]
        self.assertEqual(('offline', 2), (target.state,
                                          len(target.sessions)))
        target = self.read('after_close')[TARGET_A]
        self.assertEqual(('offline', []), (target.state, target.sessions))

    def test_same_as_the_driver_s_parser_on_every_sample(self):
        """Two readings, one truth: they agree on the real listings."""
        for name in sorted(os.listdir(SAMPLES)):
            listing = sample(name[:-len('.txt')])
            ours = {t.name: t for t in probe.read_tgt_listing(listing)}
            theirs = tgtadm.parse_targets(listing)
            self.assertEqual(sorted(theirs), sorted(ours), name)
            for tname, state in theirs.items():
                target = ours[tname]
                self.assertEqual(
                    (state.tid, state.acls + state.address_acls,
                     [s.initiator for s in state.sessions],
                     sorted(state.luns), state.accounts),
                    (target.tid, target.acls,
                     [s.split(' ')[0] for s in target.sessions],
                     sorted(int(lun) for lun in target.luns),
                     target.accounts), name)

    def test_only_the_lines_tgtd_prints_count(self):
        listing = ('Target 1: iqn.x:v\n'
                   '    ACL information:\n'
                   '        iqn.x:a\n'
                   '     iqn.x:indented-5\n'
                   '            iqn.x:indented-12\n'
                   '        iqn.x:b\r\n'
                   'junk\n')
        target, = probe.read_tgt_listing(listing)
        self.assertEqual(['iqn.x:a', 'iqn.x:b\r'], target.acls)

    def test_malformed_header(self):
        self.assertRaises(probe.ProbeError, probe.read_tgt_listing,
                          'Target x: iqn.x:v\n')


class TgtProbeTestCase(testtools.TestCase):
    """Access as tgtd lists it, whatever the driver's own reading says."""

    def setUp(self):
        super(TgtProbeTestCase, self).setUp()
        self.probe = probe.TgtProbe()
        self.shown = []
        self.useFixture(fixtures.MockPatchObject(
            probe.TgtProbe, 'listing', self.listing))

    def listing(self, driver):
        self.shown.append(driver)
        return driver.target.listing

    def access(self, name, volume, iqn):
        return self.probe.host_has_access(Driver(sample(name)),
                                          Volume(volume), connector(iqn))

    def test_forged_driver_reading_hides_a_leftover_acl_entry(self):
        """The driver's parser hides host1's entry; tgtd still has it."""
        driver = Driver(sample('acl_no_session'))
        volume = Volume('volume-aaaa')
        state = driver.target.find(driver.target_name(volume))
        self.assertEqual([HOST2], state.initiators)     # host1 hidden
        # HEAD's probe read that state: host1 had no access.
        self.assertTrue(self.probe.host_has_access(driver, volume,
                                                   connector(HOST1)))
        self.assertEqual([driver], self.shown)          # tgtadm, not find

    def test_forged_driver_reading_hides_a_session(self):
        self.assertTrue(self.access('session_without_acl', 'volume-aaaa',
                                    HOST1))

    def test_acl_entries_and_sessions(self):
        for name in ('acl_no_session', 'two_sessions'):
            self.assertTrue(self.access(name, 'volume-aaaa', HOST2), name)
            self.assertFalse(self.access(name, 'volume-aaaa', HOST3), name)
        self.assertFalse(self.access('after_close', 'volume-aaaa', HOST1))
        self.assertTrue(self.access('after_close', 'volume-aaaa', HOST2))

    def test_offline_target_with_sessions_still_counts(self):
        self.assertTrue(self.access('offline', 'volume-aaaa', HOST1))

    def test_address_rule_admits_everyone(self):
        for iqn in (HOST3, 'ALL', '', None):
            self.assertTrue(self.access('address_rules', 'volume-bbbb', iqn))
        self.assertFalse(self.access('address_rules', 'volume-aaaa', HOST3))

    def test_a_name_is_only_its_own(self):
        for iqn in ('', None, 'iqn.2026-11', HOST1[:-1], HOST1 + ' alias:'):
            self.assertFalse(self.access('two_sessions', 'volume-aaaa', iqn),
                             iqn)

    def test_exported(self):
        self.assertTrue(self.probe.exported(Driver(sample('bare_target')),
                                            Volume('volume-aaaa')))
        self.assertFalse(self.probe.exported(Driver(sample('empty')),
                                             Volume('volume-aaaa')))
        self.assertFalse(self.probe.exported(Driver(sample('two_sessions')),
                                             Volume('volume-bbbb')))

    def test_a_target_of_another_name_backed_by_the_volume_counts(self):
        driver = Driver(sample('two_sessions'))
        driver.target_name = lambda volume: 'iqn.x:elsewhere'
        self.assertTrue(self.probe.exported(driver, Volume('volume-aaaa')))
        self.assertTrue(self.probe.host_has_access(
            driver, Volume('volume-aaaa'), connector(HOST1)))
        self.assertFalse(self.probe.exported(driver, Volume('volume-cccc')))
        self.assertFalse(self.probe.exported(driver, Volume('volume-bbbb')))


class TgtadmCommandTestCase(testtools.TestCase):

    def run_with(self, proc, driver=None):
        calls = []

        def run(argv, **kwargs):
            calls.append((argv, kwargs))
            if isinstance(proc, Exception):
                raise proc
            return proc
        self.useFixture(fixtures.MockPatchObject(probe.subprocess, 'run',
                                                 run))
        return probe.TgtProbe().listing(driver or Driver()), calls

    def test_the_backend_s_control_port(self):
        out, calls = self.run_with(subprocess.CompletedProcess(
            [], 0, sample('two_sessions').encode(), b''))
        self.assertEqual(sample('two_sessions'), out)
        self.assertEqual(['tgtadm', '-C', '3261', '--lld', 'iscsi', '--op',
                          'show', '--mode', 'target'], calls[0][0])

    def test_port_of_the_driver_s_target_without_the_option(self):
        driver = Driver()
        driver.configuration = object()
        _out, calls = self.run_with(subprocess.CompletedProcess(
            [], 0, b'', b''), driver)
        self.assertEqual('9999', calls[0][0][2])

    def test_failure_is_a_probe_error(self):
        err = self.assertRaises(
            probe.ProbeError, self.run_with, subprocess.CompletedProcess(
                [], 107, b'', b'tgtadm: failed to send request hdr to tgt '
                b'daemon, Transport endpoint is not connected\n'))
        self.assertIn('exited 107: tgtadm: failed to send', str(err))
        self.assertRaises(probe.ProbeError, self.run_with,
                          FileNotFoundError('tgtadm'))

    def test_no_import_of_the_driver_s_targets(self):
        source = inspect.getsource(probe)
        self.assertNotIn('cinder_forcedetach.targets', source.replace(
            ':class:`~cinder_forcedetach.targets', ''))
        self.assertNotIn('import tgt', source)
