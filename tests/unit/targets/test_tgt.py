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

"""The tgtadm commands the target layer issues, case by case.

The target daemon is replaced by a table of its answers (stdout, or exit
code and message as Debian's tgt 1.0.85 prints them); the functional tests
run the same code against a real tgtd.
"""

import ddt
import fixtures
from oslo_concurrency import lockutils
from oslo_config import fixture as config_fixture
import testtools

from cinder_forcedetach import exception
from cinder_forcedetach.privileged import tgt as privileged_tgt
from cinder_forcedetach.targets import tgt

IQN = 'iqn.2010-10.org.openstack:volume-1'
HOST_A = 'iqn.1994-05.com.example:a'
HOST_B = 'iqn.1994-05.com.example:b'


def show(sessions=(), acls=(), accounts=('chapuser',), tid=1, name=IQN):
    """A ``tgtadm --op show --mode target`` listing of one target."""
    lines = ['Target %d: %s' % (tid, name),
             '    System information:',
             '        Driver: iscsi',
             '        State: ready',
             '    I_T nexus information:']
    for sid, initiator in sessions:
        lines += ['        I_T nexus: %d' % sid,
                  '            Initiator: %s alias: none' % initiator,
                  '            Connection: 0',
                  '                IP Address: 127.0.0.1']
    lines += ['    LUN information:',
              '        LUN: 0',
              '            Type: controller',
              '        LUN: 1',
              '            Type: disk',
              '            Backing store path: /v/volume-1',
              '    Account information:']
    lines += ['        %s' % a for a in accounts]
    lines += ['    ACL information:']
    lines += ['        %s' % a for a in acls]
    return '\n'.join(lines) + '\n'


class FakeTgtadm(object):
    """Answers tgtadm like the daemon; records each command.

    It stands behind the real privileged operations' argument checks
    (:class:`privileged_tgt.Commands`): only the process is faked.
    """

    def __init__(self, listing='', errors=None):
        self.listing = listing
        self.errors = dict(errors or {})
        self.commands = []

    def __getattr__(self, operation):
        build = getattr(privileged_tgt.Commands, operation)
        return lambda *args: self(build(*args))

    def __call__(self, argv):
        assert argv[:5] == ('tgtadm', '-C', '7', '--lld', 'iscsi'), argv
        args = argv[5:]
        op = ' '.join(args[:4])
        self.commands.append(op if op.startswith('--op show') else
                             ' '.join(args))
        for key, (code, message) in list(self.errors.items()):
            if ' '.join(args).startswith(key):
                return code, '', 'tgtadm: %s\n' % message
        if op == '--op show --mode target':
            return 0, self.listing, ''
        return 0, '', ''


@ddt.ddt
class TgtAdmTeardownTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(
        # (case, listing, initiators, errors, expected commands, remaining)
        ('idle, one host', show(acls=[HOST_A]), [HOST_A], {},
         ['--op unbind --mode target --tid 1 --initiator-name ' + HOST_A],
         []),
        ('in use, one host', show(sessions=[(3, HOST_A)], acls=[HOST_A]),
         [HOST_A], {},
         ['--op unbind --mode target --tid 1 --initiator-name ' + HOST_A,
          '--op delete --mode conn --tid 1 --sid 3 --cid 0'], []),
        ('shared export keeps the other host',
         show(sessions=[(3, HOST_A), (4, HOST_B)], acls=[HOST_A, HOST_B]),
         [HOST_A], {},
         ['--op unbind --mode target --tid 1 --initiator-name ' + HOST_A,
          '--op delete --mode conn --tid 1 --sid 3 --cid 0'], [HOST_B]),
        ('all hosts, session without ACL',
         show(sessions=[(3, HOST_A), (4, HOST_B)], acls=[HOST_A]),
         None, {},
         ['--op unbind --mode target --tid 1 --initiator-name ' + HOST_A,
          '--op delete --mode conn --tid 1 --sid 3 --cid 0',
          '--op delete --mode conn --tid 1 --sid 4 --cid 0'], []),
        ('session vanished meanwhile', show(sessions=[(3, HOST_A)]),
         [HOST_A], {'--op delete --mode conn': (22, "can't find the session")},
         ['--op delete --mode conn --tid 1 --sid 3 --cid 0'], []),
        ('target already gone', '', [HOST_A], {}, [], []),
    )
    def test_revoke(self, case, listing, initiators, errors, expected,
                    remaining):
        fake = FakeTgtadm(listing, errors)
        target = tgt.TgtAdm(control_port=7, ops=fake)
        self.assertEqual(remaining, target.revoke(IQN, initiators), case)
        self.assertEqual(['--op show --mode target'] + expected,
                         fake.commands, case)

    @ddt.unpack
    @ddt.data(
        ('idle', show(acls=[HOST_A]), {},
         ['--op unbind --mode target --tid 1 --initiator-name ' + HOST_A,
          '--op delete --mode target --tid 1 --force',
          '--op delete --mode account --user chapuser']),
        ('in use', show(sessions=[(3, HOST_A)], acls=[HOST_A]), {},
         ['--op unbind --mode target --tid 1 --initiator-name ' + HOST_A,
          '--op delete --mode conn --tid 1 --sid 3 --cid 0',
          '--op delete --mode target --tid 1 --force',
          '--op delete --mode account --user chapuser']),
        ('target and account vanished meanwhile', show(), {
            '--op delete --mode target': (22, "can't find the target"),
            '--op delete --mode account': (22, "can't find the account")},
         ['--op delete --mode target --tid 1 --force',
          '--op delete --mode account --user chapuser']),
        ('already gone', '', {}, []),
    )
    def test_unexport(self, case, listing, errors, expected):
        fake = FakeTgtadm(listing, errors)
        tgt.TgtAdm(control_port=7, ops=fake).unexport(IQN)
        self.assertEqual(['--op show --mode target'] + expected,
                         fake.commands, case)

    def test_target_delete_failure_keeps_the_account(self):
        fake = FakeTgtadm(show(), {'--op delete --mode target': (
            22, 'this target is still active')})
        target = tgt.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetCommandFailed,
                          target.unexport, IQN)
        self.assertNotIn('--op delete --mode account --user chapuser',
                         fake.commands)

    @ddt.data('revoke', 'unexport', 'find')
    def test_daemon_down_is_a_failure_never_gone(self, method):
        fake = FakeTgtadm(errors={'--op show': (
            107, 'failed to send request hdr to tgt daemon, Transport '
                 'endpoint is not connected')})
        target = tgt.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetDaemonUnavailable,
                          getattr(target, method), IQN)

    def test_daemon_down_mid_teardown(self):
        fake = FakeTgtadm(show(sessions=[(3, HOST_A)], acls=[HOST_A]), {
            '--op delete --mode conn': (107, 'Transport endpoint is not '
                                             'connected')})
        target = tgt.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetDaemonUnavailable,
                          target.unexport, IQN)
        self.assertNotIn('--op delete --mode target --tid 1 --force',
                         fake.commands)

    def test_other_error_is_not_swallowed(self):
        fake = FakeTgtadm(show(acls=[HOST_A]), {
            '--op unbind': (22, 'out of memory')})
        target = tgt.TgtAdm(control_port=7, ops=fake)
        err = self.assertRaises(exception.TargetCommandFailed,
                                target.revoke, IQN, [HOST_A])
        self.assertIn('out of memory', str(err))


class TgtAdmExportTestCase(testtools.TestCase):

    def setUp(self):
        super(TgtAdmExportTestCase, self).setUp()
        lock_path = self.useFixture(fixtures.TempDir()).path
        conf = self.useFixture(config_fixture.Config(lockutils.CONF))
        conf.config(lock_path=lock_path, group='oslo_concurrency')

    def test_new_export_takes_next_tid_and_chap(self):
        other = show(tid=4, name='iqn.other', accounts=())
        fake = FakeTgtadm(other)
        state = tgt.TgtAdm(control_port=7, ops=fake).export(
            IQN, '/v/volume-1', 'user', 's3cret')
        self.assertEqual(5, state.tid)
        self.assertEqual(
            ['--op show --mode target',
             '--op new --mode target --tid 5 --targetname ' + IQN,
             '--op new --mode logicalunit --tid 5 --lun 1 --backing-store '
             '/v/volume-1',
             '--op new --mode account --user user --password s3cret',
             '--op bind --mode account --tid 5 --user user'], fake.commands)

    def test_existing_export_is_reused(self):
        fake = FakeTgtadm(show(accounts=['user']))
        tgt.TgtAdm(control_port=7, ops=fake).export(
            IQN, '/v/volume-1', 'user', 's3cret')
        self.assertEqual(['--op show --mode target'], fake.commands)

    def test_grant_is_idempotent(self):
        fake = FakeTgtadm(show(acls=[HOST_A]))
        target = tgt.TgtAdm(control_port=7, ops=fake)
        target.grant(IQN, HOST_A)
        target.grant(IQN, HOST_B)
        self.assertEqual(
            ['--op show --mode target', '--op show --mode target',
             '--op bind --mode target --tid 1 --initiator-name ' + HOST_B],
            fake.commands)


class ParseTestCase(testtools.TestCase):

    def test_parse_two_targets(self):
        listing = (show(sessions=[(3, HOST_A)], acls=[HOST_A, HOST_B]) +
                   show(tid=2, name='iqn.b', accounts=()))
        targets = tgt.parse_targets(listing)
        self.assertEqual({IQN, 'iqn.b'}, set(targets))
        first = targets[IQN]
        self.assertEqual((1, [0, 1], ['chapuser'], [HOST_A, HOST_B]),
                         (first.tid, first.luns, first.accounts, first.acls))
        self.assertEqual([(3, HOST_A, [0])],
                         [(s.sid, s.initiator, s.connections)
                          for s in first.sessions])
        self.assertEqual([HOST_A, HOST_B], first.initiators)
        self.assertEqual([], targets['iqn.b'].accounts)


class HostileListingTestCase(testtools.TestCase):
    """An initiator controls the name and alias tgtd prints for it."""

    def test_forged_target_in_a_session_is_refused(self):
        forged = HOST_A + ' alias: x\nTarget 9: ' + IQN + '\n        y'
        listing = show(sessions=[(3, forged)], acls=[HOST_A])
        err = self.assertRaises(exception.TargetCommandFailed,
                                tgt.parse_targets, listing)
        self.assertIn('ambiguous', str(err))

    def test_forged_tid_is_refused(self):
        forged = HOST_A + ' alias: x\nTarget 1: iqn.x:y\n        y'
        self.assertRaises(exception.TargetCommandFailed, tgt.parse_targets,
                          show(sessions=[(3, forged)]))

    def test_forged_section_is_refused(self):
        forged = HOST_A + ' alias: x\n    ACL information:\n        ALL'
        self.assertRaises(exception.TargetCommandFailed, tgt.parse_targets,
                          show(sessions=[(3, forged)], acls=[HOST_B]))

    def test_forged_entries_do_not_rename_a_session(self):
        forged = HOST_A + ' alias: x\n            Initiator: ' + HOST_B
        state = tgt.parse_targets(show(sessions=[(3, forged)],
                                       acls=[HOST_B]))[IQN]
        self.assertEqual([HOST_B], state.acls)
        self.assertEqual([(3, HOST_A)], [(s.sid, s.initiator)
                                         for s in state.sessions])

    def test_other_line_breaks_cut_as_splitlines_does(self):
        for brk in ('\r', '\x1c', '\u2028'):
            forged = (HOST_A + ' alias: x' + brk + 'Target 9: ' + IQN +
                      brk + '        y')
            self.assertRaises(exception.TargetCommandFailed,
                              tgt.parse_targets,
                              show(sessions=[(3, forged)], acls=[HOST_A]))
        listing = show(sessions=[(3, HOST_A)], acls=[HOST_A])
        self.assertEqual(tgt.parse_targets(listing),
                         tgt.parse_targets(listing.replace('\n', '\r\n')))

    def test_address_rules_are_apart_from_names(self):
        state = tgt.parse_targets(show(
            acls=['ALL', '127.0.0.0/8', '198.51.100.7', HOST_A]))[IQN]
        self.assertEqual([HOST_A], state.acls)
        self.assertEqual(['ALL', '127.0.0.0/8', '198.51.100.7'],
                         state.address_acls)

    def test_revoke_all_unbinds_address_rules(self):
        fake = FakeTgtadm(show(sessions=[(3, 'iqn.2026-01.org.x:any')],
                               acls=['ALL', HOST_A]))
        remaining = tgt.TgtAdm(control_port=7, ops=fake).revoke(IQN)
        self.assertEqual([], remaining)
        self.assertEqual(
            ['--op show --mode target',
             '--op unbind --mode target --tid 1 --initiator-name ' + HOST_A,
             '--op unbind --mode target --tid 1 --initiator-address ALL',
             '--op delete --mode conn --tid 1 --sid 3 --cid 0'],
            fake.commands)

    def test_revoke_one_host_of_an_address_rule_export(self):
        """Upstream's ALL export: narrowed to the kept names first."""
        other = 'iqn.2026-01.org.example:unlisted'
        fake = FakeTgtadm(show(sessions=[(3, HOST_A), (4, HOST_B),
                                         (5, other)], acls=['ALL']))
        tgt.TgtAdm(control_port=7, ops=fake).revoke(IQN, [HOST_A],
                                                    keep=[HOST_B])
        self.assertEqual(
            ['--op show --mode target',
             '--op bind --mode target --tid 1 --initiator-name ' + HOST_B,
             '--op unbind --mode target --tid 1 --initiator-address ALL',
             '--op show --mode target',
             '--op delete --mode conn --tid 1 --sid 3 --cid 0',
             '--op delete --mode conn --tid 1 --sid 5 --cid 0'],
            fake.commands)

    def test_unparsable_acl_name_goes_with_the_target(self):
        fake = FakeTgtadm(show(acls=['iqn.2026-01.org.example:b;x']))
        tgt.TgtAdm(control_port=7, ops=fake).unexport(IQN)
        self.assertEqual(
            ['--op show --mode target',
             '--op delete --mode target --tid 1 --force',
             '--op delete --mode account --user chapuser'], fake.commands)
