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

import re

import ddt
import fixtures
from oslo_concurrency import lockutils
from oslo_config import fixture as config_fixture
import testtools

from cinder_forcedetach import exception
from cinder_forcedetach.privileged import tgt as privileged_tgt
from cinder_forcedetach.targets import tgtadm

IQN = 'iqn.2010-10.org.openstack:volume-1'
HOST_A = 'iqn.1994-05.com.example:a'
HOST_B = 'iqn.1994-05.com.example:b'
HOST_C = 'iqn.1994-05.com.example:c'


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


def names(*targets, lld='iscsi'):
    """A ``tgtadm --op show --mode lld`` listing: (tid, name) pairs."""
    lines = ['LLDs:', '    %s: ready' % lld]
    lines += ['        Target %d: %s' % t for t in targets]
    return '\n'.join(lines + ['    iser: error']) + '\n'


def conns(*sessions):
    """A ``tgtadm --op show --mode conn --tid T`` listing.

    *sessions*: (sid, initiator) or (sid, initiator, [cids]).
    """
    lines = []
    for session in sessions:
        sid, initiator = session[:2]
        for cid in (session[2] if len(session) > 2 else [0]):
            lines += ['Session: %d' % sid, '    Connection: %d' % cid,
                      '        Initiator: %s' % initiator,
                      '        IP Address: 127.0.0.1']
    return '\n'.join(lines) + ('\n' if lines else '')


class FakeTgtadm(object):
    """Answers tgtadm like the daemon; records each command.

    It stands behind the real privileged operations' argument checks
    (:class:`privileged_tgt.Commands`): only the process is faked.  The
    short listing of names (``--mode lld``) is made from *listing* unless
    given; *connections*: the answer to ``--mode conn``.
    """

    def __init__(self, listing='', errors=None, connections='',
                 target_names=None):
        self.listing = listing
        self.errors = dict(errors or {})
        self.connections = connections
        self.target_names = target_names
        self.commands = []

    def __getattr__(self, operation):
        build = getattr(privileged_tgt.Commands, operation)
        return lambda *args: self(build(*args))

    def __call__(self, argv):
        assert argv[:5] == ('tgtadm', '-C', '7', '--lld', 'iscsi'), argv
        args = argv[5:]
        command = ' '.join(args)
        self.commands.append(command)
        for key, answers in list(self.errors.items()):
            if command.startswith(key):
                if isinstance(answers, list):
                    if not answers:
                        continue
                    code, message = answers.pop(0)
                else:
                    code, message = answers
                return code, '', 'tgtadm: %s\n' % message
        if command == '--op show --mode target':
            return 0, self.listing, ''
        if command == '--op show --mode lld':
            if self.target_names is not None:
                return 0, self.target_names, ''
            return 0, names(*[(int(t), n) for t, n in re.findall(
                r'^Target (\d+): (\S+)$', self.listing, re.M)]), ''
        if command.startswith('--op show --mode conn'):
            return 0, self.connections, ''
        return 0, '', ''


LLD = '--op show --mode lld'
OFFLINE = '--op update --mode target --tid %d --name state --value offline'


def unbind(initiator, tid=1):
    return '--op unbind --mode target --tid %d --initiator-name %s' % (
        tid, initiator)


def delete_conn(sid, cid=0, tid=1):
    return '--op delete --mode conn --tid %d --sid %d --cid %d' % (
        tid, sid, cid)


class _NoSleep(fixtures.Fixture):
    def _setUp(self):
        self.delays = []
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.targets.tgtadm.time.sleep',
            self.delays.append))


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
        ('session vanished meanwhile', show(sessions=[(3, HOST_A)]),
         [HOST_A], {'--op delete --mode conn': (22, "can't find the session")},
         ['--op delete --mode conn --tid 1 --sid 3 --cid 0'], []),
        ('target already gone', '', [HOST_A], {}, [], []),
    )
    def test_revoke_one_host(self, case, listing, initiators, errors,
                             expected, remaining):
        """One host: its ACL entry and address rules are read (listing)."""
        fake = FakeTgtadm(listing, errors)
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        self.assertEqual(remaining, target.revoke(IQN, initiators), case)
        self.assertEqual(['--op show --mode target'] + expected,
                         fake.commands, case)

    @ddt.unpack
    @ddt.data(
        # (case, connections, known, errors, expected after the lookup)
        ('idle', '', [HOST_A], {},
         [OFFLINE % 1, '--op show --mode conn --tid 1', unbind(HOST_A)]),
        ('in use, a session without ACL, a known host without session',
         conns((3, HOST_A), (4, HOST_B, [0, 1])), [HOST_A, HOST_C], {},
         [OFFLINE % 1, '--op show --mode conn --tid 1', unbind(HOST_A),
          unbind(HOST_C), unbind(HOST_B),
          delete_conn(3), delete_conn(4, 0), delete_conn(4, 1)]),
        ('everything vanished meanwhile', conns((3, HOST_A)), [HOST_A],
         {'--op unbind --mode target --tid 1 --initiator-name': (
             22, 'this access control rule does not exist'),
          '--op delete --mode conn': (22, "can't find the session")},
         [OFFLINE % 1, '--op show --mode conn --tid 1', unbind(HOST_A),
          delete_conn(3)]),
        ('target deleted after the lookup', '', [HOST_A],
         {'--op update': (22, "can't find the target"),
          '--op unbind': (22, "can't find the target"),
          '--op show --mode conn': (22, "can't find the target")},
         [OFFLINE % 1, '--op show --mode conn --tid 1', unbind(HOST_A)]),
    )
    def test_revoke_every_host(self, case, connections, known, errors,
                               expected):
        """Offline first, then what can be named; no listing of all."""
        fake = FakeTgtadm(show(acls=[HOST_A]), errors, connections)
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        self.assertEqual([], target.revoke(IQN, known=known), case)
        self.assertEqual([LLD] + expected, fake.commands, case)
        self.assertNotIn('--op show --mode target', fake.commands)

    def test_revoke_every_host_of_a_target_already_gone(self):
        fake = FakeTgtadm(show(tid=2, name='iqn.2010-10.org.openstack:v2'))
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        for _ in range(2):
            self.assertEqual([], target.revoke(IQN, known=[HOST_A]))
        self.assertEqual([LLD, LLD], fake.commands)

    def test_a_reused_tid_is_never_acted_on(self):
        """Our target was tid 1; tid 1 now names another volume's target."""
        other = 'iqn.2010-10.org.openstack:volume-2'
        fake = FakeTgtadm(show(tid=1, name=other, acls=[HOST_A]),
                          connections=conns((3, HOST_A)))
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        target.revoke(IQN, known=[HOST_A])
        target.unexport(IQN, accounts=['chapuser'])
        self.assertEqual([LLD, LLD, '--op delete --mode account --user '
                                    'chapuser'], fake.commands)

    def test_the_tid_is_the_one_named_now(self):
        fake = FakeTgtadm(show(tid=1, name='iqn.2010-10.org.openstack:v0') +
                          show(tid=7, sessions=[(3, HOST_A)]),
                          connections=conns((3, HOST_A)))
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        target.revoke(IQN)
        target.unexport(IQN)
        self.assertEqual(
            [LLD, OFFLINE % 7, '--op show --mode conn --tid 7',
             unbind(HOST_A, tid=7), delete_conn(3, tid=7),
             LLD, '--op delete --mode target --tid 7 --force'],
            fake.commands)

    def test_hostile_session_names_are_not_unbound(self):
        """Not iSCSI names: never given to tgtadm; their sessions go."""
        fake = FakeTgtadm(show(), connections=conns(
            (3, 'iqn.2026-01.org.example:b;x'), (4, 'ALL')))
        tgtadm.TgtAdm(control_port=7, ops=fake).revoke(IQN, known=[])
        self.assertEqual(
            [LLD, OFFLINE % 1, '--op show --mode conn --tid 1',
             delete_conn(3), delete_conn(4)], fake.commands)

    @ddt.unpack
    @ddt.data(
        ('idle, looked up', None, [], {},
         [LLD, '--op delete --mode target --tid 1 --force',
          '--op delete --mode account --user chapuser']),
        ('as just read: its accounts and the volume\'s', 'state',
         ['volumeuser'], {},
         ['--op delete --mode target --tid 1 --force',
          '--op delete --mode account --user chapuser',
          '--op delete --mode account --user volumeuser']),
        ('target and account vanished meanwhile', 'state', ['chapuser'], {
            '--op delete --mode target': (22, "can't find the target"),
            '--op delete --mode account': (22, "can't find the account")},
         ['--op delete --mode target --tid 1 --force',
          '--op delete --mode account --user chapuser']),
    )
    def test_unexport(self, case, state, accounts, errors, expected):
        fake = FakeTgtadm(show(sessions=[(3, HOST_A)], acls=[HOST_A]),
                          errors)
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        if state:
            state = target.find(IQN)
            fake.commands = []
        target.unexport(IQN, state,
                        accounts=accounts or (['chapuser'] if not state
                                              else []))
        self.assertEqual(expected, fake.commands, case)

    def test_unexport_of_a_target_already_gone_deletes_the_account(self):
        fake = FakeTgtadm('')
        tgtadm.TgtAdm(control_port=7, ops=fake).unexport(
            IQN, accounts=['chapuser'])
        self.assertEqual([LLD, '--op delete --mode account --user chapuser'],
                         fake.commands)

    def test_lun_still_active_takes_the_target_offline_and_retries(self):
        sleep = self.useFixture(_NoSleep())
        fake = FakeTgtadm(show(), {'--op delete --mode target': [
            (22, 'this logical unit is still active'),
            (22, 'this logical unit is still active')]})
        tgtadm.TgtAdm(control_port=7, ops=fake).unexport(IQN)
        delete = '--op delete --mode target --tid 1 --force'
        self.assertEqual([LLD, delete, OFFLINE % 1, delete, delete],
                         fake.commands)
        self.assertEqual(list(tgtadm.DELETE_RETRY_DELAYS[:2]), sleep.delays)

    def test_lun_active_for_good_fails_offline_and_keeps_the_account(self):
        self.useFixture(_NoSleep())
        fake = FakeTgtadm(show(), {'--op delete --mode target': (
            22, 'this logical unit is still active')})
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        err = self.assertRaises(exception.TargetCommandFailed,
                                target.unexport, IQN, None, ['chapuser'])
        self.assertIn('still active', str(err))
        self.assertEqual(len(tgtadm.DELETE_RETRY_DELAYS) + 1,
                         fake.commands.count(
                             '--op delete --mode target --tid 1 --force'))
        self.assertEqual(1, fake.commands.count(OFFLINE % 1))
        self.assertNotIn('--op delete --mode account --user chapuser',
                         fake.commands)

    def test_target_delete_failure_keeps_the_account(self):
        fake = FakeTgtadm(show(), {'--op delete --mode target': (
            22, 'out of memory')})
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetCommandFailed,
                          target.unexport, IQN, None, ['chapuser'])
        self.assertNotIn('--op delete --mode account --user chapuser',
                         fake.commands)
        self.assertNotIn(OFFLINE % 1, fake.commands)

    @ddt.data(('revoke', IQN), ('revoke', IQN, [HOST_A]), ('unexport', IQN),
              ('find', IQN), ('tid_of', IQN), ('connections', 1))
    def test_daemon_down_is_a_failure_never_gone(self, call):
        fake = FakeTgtadm(errors={'--op show': (
            107, 'failed to send request hdr to tgt daemon, Transport '
                 'endpoint is not connected')})
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetDaemonUnavailable,
                          getattr(target, call[0]), *call[1:])

    def test_daemon_down_mid_teardown(self):
        fake = FakeTgtadm(
            show(sessions=[(3, HOST_A)], acls=[HOST_A]),
            {'--op delete --mode conn': (107, 'Transport endpoint is not '
                                              'connected')},
            connections=conns((3, HOST_A)))
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetDaemonUnavailable,
                          target.revoke, IQN)
        self.assertEqual(OFFLINE % 1, fake.commands[1])
        self.assertNotIn('--op delete --mode target --tid 1 --force',
                         fake.commands)

    def test_other_error_is_not_swallowed(self):
        fake = FakeTgtadm(show(acls=[HOST_A]), {
            '--op unbind': (22, 'out of memory')})
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        err = self.assertRaises(exception.TargetCommandFailed,
                                target.revoke, IQN, [HOST_A])
        self.assertIn('out of memory', str(err))
        err = self.assertRaises(exception.TargetCommandFailed,
                                target.revoke, IQN, known=[HOST_A])
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
        state = tgtadm.TgtAdm(control_port=7, ops=fake).export(
            IQN, '/v/volume-1', 'user', 's3cret')
        self.assertEqual(5, state.tid)
        self.assertEqual(
            [LLD,
             '--op new --mode target --tid 5 --targetname ' + IQN,
             '--op new --mode logicalunit --tid 5 --lun 1 --backing-store '
             '/v/volume-1',
             '--op new --mode account --user user --password s3cret',
             '--op bind --mode account --tid 5 --user user'], fake.commands)

    def test_next_tid_counts_every_lld(self):
        fake = FakeTgtadm(target_names='LLDs:\n    iscsi: ready\n'
                          '        Target 2: iqn.a\n    iser: ready\n'
                          '        Target 9: iqn.b\n')
        state = tgtadm.TgtAdm(control_port=7, ops=fake).export(IQN, '/v/a')
        self.assertEqual(10, state.tid)

    def test_existing_export_is_reused(self):
        fake = FakeTgtadm(show(accounts=['user']))
        tgtadm.TgtAdm(control_port=7, ops=fake).export(
            IQN, '/v/volume-1', 'user', 's3cret')
        self.assertEqual([LLD, '--op show --mode target'], fake.commands)

    def test_grant_is_idempotent(self):
        fake = FakeTgtadm(show(acls=[HOST_A]))
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        target.grant(IQN, HOST_A)
        target.grant(IQN, HOST_B)
        self.assertEqual(
            ['--op show --mode target', '--op show --mode target',
             '--op bind --mode target --tid 1 --initiator-name ' + HOST_B],
            fake.commands)

    def test_grant_on_the_state_just_read(self):
        fake = FakeTgtadm(show(acls=[HOST_A]))
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        state = target.find(IQN)
        target.grant(IQN, HOST_B, state=state)
        target.grant(IQN, HOST_B, state=state)
        self.assertEqual(
            ['--op show --mode target',
             '--op bind --mode target --tid 1 --initiator-name ' + HOST_B],
            fake.commands)


class ParseTestCase(testtools.TestCase):

    def test_parse_two_targets(self):
        listing = (show(sessions=[(3, HOST_A)], acls=[HOST_A, HOST_B]) +
                   show(tid=2, name='iqn.b', accounts=()))
        targets = tgtadm.parse_targets(listing)
        self.assertEqual({IQN, 'iqn.b'}, set(targets))
        first = targets[IQN]
        self.assertEqual((1, [0, 1], ['chapuser'], [HOST_A, HOST_B]),
                         (first.tid, first.luns, first.accounts, first.acls))
        self.assertEqual([(3, HOST_A, [0])],
                         [(s.sid, s.initiator, s.connections)
                          for s in first.sessions])
        self.assertEqual([HOST_A, HOST_B], first.initiators)
        self.assertEqual([], targets['iqn.b'].accounts)
        self.assertTrue(tgtadm.is_ready(first))

    def test_offline_target(self):
        listing = show().replace('State: ready', 'State: offline')
        self.assertFalse(tgtadm.is_ready(tgtadm.parse_targets(listing)[IQN]))

    def test_parse_target_names(self):
        self.assertEqual({IQN: 1, 'iqn.b': 12},
                         tgtadm.parse_target_names(names((1, IQN),
                                                         (12, 'iqn.b'))))
        self.assertEqual({}, tgtadm.parse_target_names(names()))

    def test_parse_connections(self):
        sessions = tgtadm.parse_connections(conns(
            (3, HOST_A), (4, HOST_B, [0, 1])) + 'Session: 5\n'
            '    Connection: 2\n        Initiator: %s\n        \n' % HOST_A)
        self.assertEqual([(3, HOST_A, [0]), (4, HOST_B, [0, 1]),
                          (5, HOST_A, [2])],
                         [(s.sid, s.initiator, s.connections)
                          for s in sessions])
        self.assertEqual([], tgtadm.parse_connections(''))


class HostileListingTestCase(testtools.TestCase):
    """An initiator controls the name and alias tgtd prints for it."""

    def test_forged_target_in_a_session_is_refused(self):
        forged = HOST_A + ' alias: x\nTarget 9: ' + IQN + '\n        y'
        listing = show(sessions=[(3, forged)], acls=[HOST_A])
        err = self.assertRaises(exception.TargetCommandFailed,
                                tgtadm.parse_targets, listing)
        self.assertIn('ambiguous', str(err))

    def test_forged_tid_is_refused(self):
        forged = HOST_A + ' alias: x\nTarget 1: iqn.x:y\n        y'
        self.assertRaises(exception.TargetCommandFailed, tgtadm.parse_targets,
                          show(sessions=[(3, forged)]))

    def test_forged_section_is_refused(self):
        forged = HOST_A + ' alias: x\n    ACL information:\n        ALL'
        self.assertRaises(exception.TargetCommandFailed, tgtadm.parse_targets,
                          show(sessions=[(3, forged)], acls=[HOST_B]))

    def test_forged_entries_do_not_rename_a_session(self):
        forged = HOST_A + ' alias: x\n            Initiator: ' + HOST_B
        state = tgtadm.parse_targets(show(sessions=[(3, forged)],
                                          acls=[HOST_B]))[IQN]
        self.assertEqual([HOST_B], state.acls)
        self.assertEqual([(3, HOST_A)], [(s.sid, s.initiator)
                                         for s in state.sessions])

    def test_other_line_breaks_cut_as_splitlines_does(self):
        for brk in ('\r', '\x1c', '\u2028'):
            forged = (HOST_A + ' alias: x' + brk + 'Target 9: ' + IQN +
                      brk + '        y')
            self.assertRaises(exception.TargetCommandFailed,
                              tgtadm.parse_targets,
                              show(sessions=[(3, forged)], acls=[HOST_A]))
        listing = show(sessions=[(3, HOST_A)], acls=[HOST_A])
        self.assertEqual(tgtadm.parse_targets(listing),
                         tgtadm.parse_targets(listing.replace('\n', '\r\n')))

    def test_address_rules_are_apart_from_names(self):
        state = tgtadm.parse_targets(show(
            acls=['ALL', '127.0.0.0/8', '198.51.100.7', HOST_A]))[IQN]
        self.assertEqual([HOST_A], state.acls)
        self.assertEqual(['ALL', '127.0.0.0/8', '198.51.100.7'],
                         state.address_acls)

    def test_revoke_all_takes_the_target_offline_first(self):
        """Offline first; the names of sessions are unbound.

        What nobody can name (an ACL entry without session or attachment,
        upstream's ALL) stays, but tgtd refuses every login to an offline
        target.
        """
        fake = FakeTgtadm(show(sessions=[(3, 'iqn.2026-01.org.x:any')],
                               acls=['ALL', HOST_A]),
                          connections=conns((3, 'iqn.2026-01.org.x:any')))
        remaining = tgtadm.TgtAdm(control_port=7, ops=fake).revoke(IQN)
        self.assertEqual([], remaining)
        self.assertEqual(
            [LLD, OFFLINE % 1, '--op show --mode conn --tid 1',
             unbind('iqn.2026-01.org.x:any'),
             delete_conn(3)], fake.commands)

    def test_revoke_one_host_of_an_address_rule_export(self):
        """Upstream's ALL export: narrowed to the kept names first."""
        other = 'iqn.2026-01.org.example:unlisted'
        fake = FakeTgtadm(show(sessions=[(3, HOST_A), (4, HOST_B),
                                         (5, other)], acls=['ALL']))
        tgtadm.TgtAdm(control_port=7, ops=fake).revoke(IQN, [HOST_A],
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
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        target.unexport(IQN, target.find(IQN))
        self.assertEqual(
            ['--op show --mode target',
             '--op delete --mode target --tid 1 --force',
             '--op delete --mode account --user chapuser'], fake.commands)

    def test_forged_state_is_refused(self):
        """An offline target cannot be made to look ready from a name."""
        forged = (HOST_A + ' alias: x\n    System information:\n'
                  '        State: ready')
        listing = show(sessions=[(3, forged)]).replace('State: ready',
                                                       'State: offline', 1)
        self.assertRaises(exception.TargetCommandFailed, tgtadm.parse_targets,
                          listing)

    def test_only_the_first_state_counts(self):
        listing = show().replace('        State: ready\n',
                                 '        State: offline\n'
                                 '        State: ready\n')
        self.assertFalse(tgtadm.is_ready(tgtadm.parse_targets(listing)[IQN]))


@ddt.ddt
class HostileNamesListingTestCase(testtools.TestCase):
    """The short listing: names are root's, read as strictly anyway."""

    @ddt.data(
        '',
        'Target 1: %s\n' % IQN,
        'LLDs:\n        Target 1: %s\n' % IQN,
        'LLDs:\n    iscsi: ready\n        Target 1: %s x\n' % IQN,
        'LLDs:\n    iscsi: ready\n        Target 1: %s\n'
        '        Target 2: %s\n' % (IQN, IQN),
        'LLDs:\n    iscsi: ready\n        Target 1: %s\n'
        '    iser: ready\n        Target 1: iqn.b\n' % IQN,
        'LLDs:\n    iscsi: ready\n         Target 1: %s\n' % IQN,
        'LLDs:\n    iscsi: ready\n        Target 1: iqn.a\rTarget 2: iqn.b'
        '\n',
        'LLDs:\n    iscsi: ready\n        Target 1: iqn.a\n\n',
    )
    def test_refused(self, listing):
        err = self.assertRaises(exception.TargetCommandFailed,
                                tgtadm.parse_target_names, listing)
        self.assertIn('ambiguous', str(err))

    @ddt.data(
        # our name twice, or on a line that is not a target line
        names((1, IQN), (2, IQN)),
        names((1, IQN), (2, 'iqn.b')).replace(
            'iqn.b', 'iqn.b\n        Target 1: ' + IQN),
        'LLDs:\n    iscsi: ready\n         Target 1: %s\n' % IQN,
        'LLDs:\n    iscsi: ready\n        Target x1: %s\n' % IQN,
        'LLDs:\n    %s: %s\n' % ('iscsi', IQN),
        # its tid twice
        names((1, IQN), (1, 'iqn.b')),
        # not tgtd's listing, or cut short
        'Target 1: %s\n' % IQN,
        'LLDs:\n    iscsi: ready\n        Target 1: %s' % IQN,
        # other line breaks cut as str.splitlines cuts them
        'LLDs:\n    iscsi: ready\n        Target 2: iqn.b\x1c'
        '        Target 1: %s\n        Target 1: iqn.c\n' % IQN,
    )
    def test_lookup_refused(self, listing):
        err = self.assertRaises(exception.TargetCommandFailed, tgtadm.find_tid,
                                listing, IQN)
        self.assertIn('ambiguous', str(err))

    def test_lookup(self):
        listing = names((3, 'iqn.b'), (12, IQN), (4, IQN + 'x'))
        self.assertEqual(12, tgtadm.find_tid(listing, IQN))
        self.assertEqual(4, tgtadm.find_tid(listing, IQN + 'x'))
        self.assertIsNone(tgtadm.find_tid(listing, IQN[:-1]))
        self.assertIsNone(tgtadm.find_tid(names(), IQN))
        self.assertEqual(tgtadm.parse_target_names(listing)[IQN],
                         tgtadm.find_tid(listing.replace('\n', '\r\n'), IQN))

    def test_refused_listing_stops_the_teardown(self):
        fake = FakeTgtadm(target_names='LLDs:\n    iscsi: ready\n'
                          '        Target 1: %s\n        Target 1: iqn.b\n'
                          % IQN)
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetCommandFailed, target.revoke, IQN)
        self.assertRaises(exception.TargetCommandFailed, target.unexport,
                          IQN, None, ['chapuser'])
        self.assertEqual([LLD, LLD], fake.commands)


@ddt.ddt
class HostileConnectionsTestCase(testtools.TestCase):
    """``--mode conn`` prints the initiator name as the initiator sent it."""

    def forged(self, sid, cid, name):
        """A name that ends the real block and adds a block of its own."""
        return (HOST_A + '\n        IP Address: 127.0.0.1\nSession: %d\n'
                '    Connection: %d\n        Initiator: %s' % (
                    sid, cid, name))

    def test_forged_block_of_a_real_session_is_refused(self):
        listing = conns((3, self.forged(4, 0, HOST_A)), (4, HOST_B))
        err = self.assertRaises(exception.TargetCommandFailed,
                                tgtadm.parse_connections, listing)
        self.assertIn('ambiguous', str(err))

    def test_forged_second_initiator_of_a_session_is_refused(self):
        listing = conns((3, self.forged(3, 1, HOST_B)))
        self.assertRaises(exception.TargetCommandFailed,
                          tgtadm.parse_connections, listing)

    @ddt.data(
        HOST_A + '\nSession: 9',
        HOST_A + '\n    Connection: 1',
        HOST_A + '\n        Initiator: ' + HOST_B,
        HOST_A + '\n        IP Address: 198.51.100.7\nSession: 9\n'
        '    Connection: 0',
        HOST_A + '\n',
    )
    def test_forged_lines_are_refused(self, name):
        self.assertRaises(exception.TargetCommandFailed,
                          tgtadm.parse_connections, conns((3, name)))

    @ddt.data('\r', '\x1c', '\u2028', '\x85')
    def test_other_line_breaks_cut_as_splitlines_does(self, brk):
        name = (HOST_A + brk + 'Session: 3' + brk + '    Connection: 0' +
                brk + '        Initiator: ' + HOST_B)
        self.assertRaises(exception.TargetCommandFailed,
                          tgtadm.parse_connections, conns((3, name)))
        listing = conns((3, HOST_A), (4, HOST_B))
        self.assertEqual(tgtadm.parse_connections(listing),
                         tgtadm.parse_connections(listing.replace('\n',
                                                                  '\r\n')))

    def test_a_forged_session_reaches_only_this_target(self):
        """A whole forged block of a session that does not exist.

        Revoking every host asks tgtd to close it on this target's tid,
        which has no such session ("can't find the session": already
        gone); the forged name is unbound from this (offline) target only.
        """
        fake = FakeTgtadm(show(), {'--op delete --mode conn --tid 1 --sid 99':
                                   (22, "can't find the session")},
                          connections=conns((3, self.forged(99, 0, HOST_B))))
        tgtadm.TgtAdm(control_port=7, ops=fake).revoke(IQN)
        self.assertEqual(
            [LLD, OFFLINE % 1, '--op show --mode conn --tid 1',
             unbind(HOST_A), unbind(HOST_B), delete_conn(3),
             delete_conn(99)], fake.commands)

    def test_refused_listing_leaves_the_target_offline(self):
        fake = FakeTgtadm(show(), connections=conns(
            (3, self.forged(4, 0, HOST_A)), (4, HOST_B)))
        target = tgtadm.TgtAdm(control_port=7, ops=fake)
        self.assertRaises(exception.TargetCommandFailed, target.revoke, IQN)
        self.assertEqual([LLD, OFFLINE % 1, '--op show --mode conn --tid 1'],
                         fake.commands)


class OfflineTargetTestCase(testtools.TestCase):

    def test_revoking_one_host_of_an_offline_target_leaves_nobody(self):
        """Every host was revoked (offline): no host keeps access."""
        listing = show(sessions=[(3, HOST_A)], acls=[HOST_A, HOST_B]).replace(
            'State: ready', 'State: offline')
        fake = FakeTgtadm(listing)
        self.assertEqual([], tgtadm.TgtAdm(control_port=7, ops=fake).revoke(
            IQN, [HOST_A], keep=[HOST_B]))
        self.assertEqual(['--op show --mode target', unbind(HOST_A),
                          delete_conn(3)], fake.commands)
