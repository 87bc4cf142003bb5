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

"""The conformance kit run on our drivers, on broken ones, and as a CLI.

Real backends: tgtd on loopback for
:class:`~cinder_forcedetach.drivers.iscsi.TgtISCSIDriver`, the SQLite
reference array behind Cinder's real ZoneManager on the emulated fabric of
:mod:`tests.support.fc_fabric` for
:class:`~cinder_forcedetach.drivers.fc.FibreChannelDriver`.  Each run of
the kit starts Cinder's API, scheduler and volume service per check.
The tgt driver's run goes through the CLI, as a vendor's does (a
cinder.conf section); the FC driver's and the broken drivers' runs use the
Python API (``harness.Target`` + ``runner.run``).

The one check of our drivers that is n/a is ``R1 idempotent_fence_clients``:
neither driver fences (``fence_clients`` is the mixin's no-op), because
revoking access already cuts the host off (tgt: ACL entry and sessions
gone; FC: LUN unmapped and zones removed).  Only RBD has clients to fence:
:mod:`tests.functional.test_conformance_rbd` runs the kit on our RBD driver,
where every check applies.

On tgt every host the kit attaches is a live qemu-io/libiscsi session
(:class:`~cinder_forcedetach.conformance.probe.TgtProbe`), so a driver that
unbinds the ACL and leaves the session fails the checks that ask whether a
host was cut off, and R8 sees whether a cut host's write lands.
The tgt probe reads tgtd's listing itself (``tgtadm``), not through the
driver's parser: with that parser forged to hide a host's ACL entry, the
driver leaves the entry and the kit fails it, where the probe that read
through the driver's parser (:class:`HeadTgtProbe`) passed.  R6 checks the
backend after every refusal, a 500 (what Cinder answers on attachment
create to a driver's input error, leaving the volume reserved) as a 400.
"""

import os
import subprocess
import sys
import tempfile

from cinder import exception as cinder_exception
import fixtures
import testtools

from cinder_forcedetach.arrays import sqlite as array_sqlite
from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import probe
from cinder_forcedetach.conformance import runner
from cinder_forcedetach.conformance import suite
from cinder_forcedetach.drivers import fc  # noqa: F401
from cinder_forcedetach.drivers import iscsi
from cinder_forcedetach.privileged import tgt as privileged_tgt
from cinder_forcedetach.targets import tgtadm
from tests import fakes
from tests.support import fc_fabric
from tests.support import tgtd as tgtd_daemon

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TGT_DRIVER = 'cinder_forcedetach.drivers.iscsi.TgtISCSIDriver'
FC_DRIVER = 'cinder_forcedetach.drivers.fc.FibreChannelDriver'
FC_TARGETS = ['5001438012345678', '5001438012345679']
# Checks whose capability our drivers truly lack (see the docstring).
NOT_APPLICABLE = {('R1', 'idempotent_fence_clients')}
# Every check of the kit (R1-R9).
N_CHECKS = 21


class NonIdempotentRevokeDriver(iscsi.TgtISCSIDriver):
    """Broken: revoking an initiator that is already gone raises."""

    def revoke_host_access(self, volume, connector):
        if connector is not None:
            state = self.target.find(self.target_name(volume))
            if state is None or (connector['initiator'] not in
                                 state.initiators):
                raise cinder_exception.VolumeBackendAPIException(
                    data='initiator %s is not bound to the target' %
                    connector['initiator'])
        return super(NonIdempotentRevokeDriver, self).revoke_host_access(
            volume, connector)


class NoopRemoveExportDriver(iscsi.TgtISCSIDriver):
    """Broken: remove_export resets nothing (the target stays)."""

    def remove_export(self, context, volume):
        pass


class SessionLeavingDriver(iscsi.TgtISCSIDriver):
    """Broken: revoke_host_access unbinds ACL entries, leaves the sessions.

    The host cannot log in again, but its live session still writes.
    Only a kit whose hosts hold live sessions tells: before the tgt probe
    logged hosts in, this driver passed every rule.
    """

    def revoke_host_access(self, volume, connector):
        state = self.target.find(self.target_name(volume))
        if state is None:
            return False
        gone = (list(state.acls) if connector is None
                else [connector['initiator']])
        for initiator in gone:
            if initiator in state.acls:
                code, _out, err = privileged_tgt.unbind_initiator(
                    self.target.control_port, state.tid, initiator)
                if code:
                    raise cinder_exception.VolumeBackendAPIException(
                        data=err)
        return bool(set(state.acls) - set(gone))


class NoGrantFenceDriver(iscsi.TgtISCSIDriver):
    """Broken: cannot tell who holds a volume, so a grant cuts nobody."""

    def volume_holders(self, volume):
        return None


class LateRefusalDriver(NoopRemoveExportDriver):
    """Broken: checks the connector only after Cinder made the export.

    Cinder calls validate_connector, create_export, initialize_connection
    in turn: this driver refuses in initialize_connection (Cinder answers
    500 and calls remove_export), and its remove_export leaves the target.
    """

    def validate_connector(self, connector):
        pass

    def initialize_connection(self, volume, connector):
        super(LateRefusalDriver, self).validate_connector(connector)
        return super(LateRefusalDriver, self).initialize_connection(
            volume, connector)


class ForgedParser(object):
    """The driver's parser, forged: it hides what tgtd still has.

    Patched over :func:`cinder_forcedetach.targets.tgtadm.parse_targets`, it
    drops *host*'s ACL entries from every target, so the driver's revoke
    of *host* closes its session but leaves its entry in tgtd (the host
    may log in again).  Once the driver revoked *host* on a target
    (:class:`ForgedListingDriver` says so), it drops *host*'s sessions
    there too: the live initiator logs back in through the leftover
    entry, and a probe reading through this parser must not see it by
    chance, depending on when it reads, but never.
    """

    def __init__(self, host):
        self.suffix = ':' + host
        self.real = tgtadm.parse_targets
        self.revoked = set()

    def __call__(self, output, only=None):
        targets = self.real(output, only)
        for name, state in targets.items():
            state.acls = [a for a in state.acls
                          if not a.endswith(self.suffix)]
            if name in self.revoked:
                state.sessions = [s for s in state.sessions
                                  if not s.initiator.endswith(self.suffix)]
        return targets


class ForgedListingDriver(iscsi.TgtISCSIDriver):
    """Our driver, reading tgtd through :attr:`forged` (a ForgedParser)."""

    forged = None

    def revoke_host_access(self, volume, connector):
        result = super(ForgedListingDriver, self).revoke_host_access(
            volume, connector)
        if connector is not None:
            self.forged.revoked.add(self.target_name(volume))
        return result


class HeadTgtProbe(probe.TgtProbe):
    """The tgt probe before issue 24 item 6: read by the driver's parser.

    Kept to show what it missed: with :class:`ForgedParser` it sees
    no leftover entry and the kit passes a driver that leaves one.
    """

    def host_has_access(self, driver, volume, connector):
        state = driver.target.find(driver.target_name(volume))
        if state is None:
            return False
        if state.address_acls:
            return True
        return (connector or {}).get('initiator') in state.initiators

    def exported(self, driver, volume):
        return driver.target.find(driver.target_name(volume)) is not None


def _summary(rows):
    return '\n' + runner.table(rows, width=400)


class _KitTestCase(testtools.TestCase):

    def run_kit(self, target, rules=None):
        rows = runner.run(target, rules=rules)
        if os.environ.get('CONFORMANCE_TABLES'):
            # Where a developer collects the tables (the vendor guide's).
            with open(os.environ['CONFORMANCE_TABLES'], 'a') as f:
                f.write('\n## %s %s\n%s\n' % (
                    self.id(), target, _summary(rows)))
        self.addDetail('conformance', testtools.content.text_content(
            _summary(rows)))
        return rows

    def assert_conformant(self, rows):
        self.assertEqual(N_CHECKS, len(rows), _summary(rows))
        for row in rows:
            wanted = (runner.NA if (row.rule, row.check) in NOT_APPLICABLE
                      else runner.PASS)
            self.assertEqual(wanted, row.result,
                             '%s %s: %s%s' % (row.rule, row.check,
                                              row.message, _summary(rows)))
        self.assertTrue(runner.passed(rows))

    def results(self, rows):
        return {(r.rule, r.check): r for r in rows}

    def assert_second_writer(self, rows):
        """Both R8 checks failed: host 1 kept its access and wrote."""
        for check, what in (
                ('reset_state_then_attach_elsewhere', 'a reset of the state: '
                 'after os-reset_status {status: available, attach_status: '
                 'detached}'),
                ('status_only_reset_then_attach_elsewhere',
                 'a status-only reset: after os-reset_status {status: '
                 'available}')):
            row = rows[('R8', check)]
            self.assertEqual(runner.FAIL, row.result)
            self.assertEqual(
                'R8 no second writer after %s and the attachment of '
                'conformance-host2: the probe says conformance-host1 still '
                'has access (a grant, session or client no live attachment '
                'explains); conformance-host1\'s live client wrote block 2 '
                'after the grant and the backend acknowledged it; block 2 '
                'on the backend is what conformance-host1 wrote' % what,
                row.message)


class TgtConformanceTestCase(_KitTestCase):
    """One tgtd for every run of the kit in this class."""

    @classmethod
    def setUpClass(cls):
        super(TgtConformanceTestCase, cls).setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix='conformance-tgt-')
        cls.tgtd = tgtd_daemon.Tgtd(cls.tmp)
        cls.tgtd.start()

    @classmethod
    def tearDownClass(cls):
        cls.tgtd.stop()
        subprocess.run(['rm', '-rf', cls.tmp], check=False)
        super(TgtConformanceTestCase, cls).tearDownClass()

    def options(self):
        volumes = self.useFixture(fixtures.TempDir()).path
        return {'forcedetach_tgt_control_port': str(self.tgtd.control_port),
                'forcedetach_volumes_dir': volumes,
                'target_ip_address': '127.0.0.1',
                'target_port': str(self.tgtd.port)}

    def target(self, driver=TGT_DRIVER, probe_class=probe.TgtProbe):
        return harness.Target(driver, self.options(), probe=probe_class)

    def targets(self):
        return {line for line in self.tgtd.tgtadm(
            '--op', 'show', '--mode', 'target').stdout.splitlines()
            if line.startswith('Target ')}

    def test_non_idempotent_revoke_fails_r1(self):
        rows = self.results(self.run_kit(
            self.target(NonIdempotentRevokeDriver), rules=['R1']))
        row = rows[('R1', 'idempotent_revoke_one_host')]
        self.assertEqual(runner.FAIL, row.result)
        self.assertTrue(row.message.startswith(
            'R1 idempotent revoke_host_access(one host): call 2/10 of '
            'revoke_host_access(volume, conformance-host1) raised '
            'VolumeBackendAPIException'), row.message)
        self.assertIn('is not bound to the target', row.message)
        # What the broken hook does not touch still passes.
        row = rows[('R1', 'idempotent_remove_export')]
        self.assertEqual(runner.PASS, row.result, row.message)

    def remove_new_targets(self, before):
        for line in self.targets() - before:
            self.tgtd.tgtadm('--op', 'delete', '--mode', 'target', '--tid',
                             line.split()[1].rstrip(':'), '--force',
                             check=False)

    def test_noop_remove_export_fails_r2_and_r5(self):
        # The broken driver leaves its targets: not ours to keep.
        self.addCleanup(self.remove_new_targets, self.targets())
        rows = self.results(self.run_kit(
            self.target(NoopRemoveExportDriver), rules=['R2', 'R5']))
        row = rows[('R2', 'revoke_none_tears_down_every_host')]
        self.assertEqual(runner.FAIL, row.result)
        self.assertEqual(
            'R2 connector None tears down every host: after '
            'revoke_host_access(volume, None) and remove_export the probe '
            'says the backend still exports the volume', row.message)
        row = rows[('R2', 'force_detach_every_host')]
        self.assertEqual(runner.FAIL, row.result)
        self.assertIn('still exported', row.message)
        for hook in ('revoke_host_access', 'fence_clients', 'remove_export'):
            row = rows[('R5', 'crash_after_%s' % hook)]
            self.assertEqual(runner.FAIL, row.result)
            self.assertTrue(row.message.startswith(
                'R5 crash after %s, then re-run: ' % hook), row.message)

    def test_driver_that_leaves_sessions_fails(self):
        """ACL unbound, session left: the live initiator still holds it."""
        rows = self.results(self.run_kit(
            self.target(SessionLeavingDriver),
            rules=['R1', 'R2', 'R3', 'R7', 'R8']))
        host1 = 'conformance-host1'
        failed = {
            ('R1', 'idempotent_revoke_one_host'):
                'R1 idempotent revoke_host_access(one host): the probe says '
                '%s kept its access after revoke_host_access(volume, %s)' % (
                    host1, host1),
            ('R2', 'revoke_none_tears_down_every_host'):
                'R2 connector None tears down every host: after '
                'revoke_host_access(volume, None) the probe says %s still '
                'has access' % host1,
            ('R3', 'force_detach_one_host_keeps_the_other'):
                'R3 a host Cinder keeps keeps its access: the probe says %s '
                'still has access' % host1,
            ('R3', 'attachment_delete_keeps_the_other'):
                'R3 a host Cinder keeps keeps its access: the probe says %s '
                'still has access' % host1,
        }
        for key, message in failed.items():
            self.assertEqual((runner.FAIL, message),
                             (rows[key].result, rows[key].message),
                             '%s %s' % key)
        self.assert_second_writer(rows)
        # The flow's remove_export takes the target, sessions and all.
        for key in (('R1', 'idempotent_revoke_every_host'),
                    ('R1', 'idempotent_remove_export'),
                    ('R2', 'force_detach_every_host'),
                    ('R7', 'force_detach_by_connector'),
                    ('R7', 'force_detach_by_attachment_id')):
            self.assertEqual(runner.PASS, rows[key].result,
                             '%s %s: %s' % (key + (rows[key].message,)))

    def test_forged_listing_hides_a_leftover_acl_only_from_the_driver(self):
        """The probe reads tgtd itself: a parser bug cannot hide from it.

        The driver's parser drops conformance-host1's ACL entry, so its
        revoke of host 1 leaves that entry in tgtd.  HEAD's probe, which
        read through the same parser, saw nothing and passed; ours reads
        tgtadm's listing and fails the driver.
        """
        host1 = 'conformance-host1'
        forged = ForgedParser(host1)
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.targets.tgtadm.parse_targets', forged))
        self.useFixture(fixtures.MonkeyPatch(
            __name__ + '.ForgedListingDriver.forged', forged))
        rules = ['R1', 'R3', 'R7']
        blind = self.run_kit(self.target(
            ForgedListingDriver, probe_class=HeadTgtProbe), rules=rules)
        self.assertTrue(runner.passed(blind), _summary(blind))
        self.assertEqual(8, len(blind), _summary(blind))
        rows = self.results(self.run_kit(self.target(ForgedListingDriver),
                                         rules=rules))
        still = 'R3 a host Cinder keeps keeps its access: the probe says %s ' \
            'still has access' % host1
        failed = {
            ('R1', 'idempotent_revoke_one_host'):
                'R1 idempotent revoke_host_access(one host): the probe says '
                '%s kept its access after revoke_host_access(volume, %s)' % (
                    host1, host1),
            ('R3', 'force_detach_one_host_keeps_the_other'): still,
            ('R3', 'attachment_delete_keeps_the_other'): still,
        }
        for key, row in rows.items():
            wanted = (runner.NA if key in NOT_APPLICABLE else
                      runner.FAIL if key in failed else runner.PASS)
            self.assertEqual((wanted, failed.get(key, row.message)),
                             (row.result, row.message), '%s %s' % key)
        # The flow's remove_export deletes the target, entry and all: R7
        # passes.

    def test_r6_says_what_cinder_does_with_a_refused_connector(self):
        """What Cinder really answers, and leaves, on our driver's refusal.

        The driver refuses each hostile connector in validate_connector
        (InvalidConnectorException): Cinder's volume manager raises
        InvalidInput, which attachment update answers with 400 but
        attachment create with 500, after it reserved the volume.
        """
        rows = self.results(self.run_kit(self.target(), rules=['R6']))
        n = len(suite.HOSTILE_COMMON) + len(suite.HOSTILE['iscsi'])
        self.assertEqual(
            (runner.PASS, 'HTTP 500 x%d, volume left reserved (attachment '
             'reserved): Cinder maps a driver\'s input error on attachment '
             'create to HTTP 500 and leaves the volume reserved; no refusal '
             'as such; the probe read the backend: nothing exported to the '
             '%d connectors' % (n, n)),
            (rows[('R6', 'attachment_create_refuses_bad_connectors')].result,
             rows[('R6', 'attachment_create_refuses_bad_connectors')]
             .message))
        self.assertEqual(
            (runner.PASS, 'HTTP 400 x%d; the probe read the backend: nothing '
             'exported to the %d connectors' % (n, n)),
            (rows[('R6', 'attachment_update_refuses_bad_connectors')].result,
             rows[('R6', 'attachment_update_refuses_bad_connectors')]
             .message))

    def test_r6_500_after_an_export_fails(self):
        """A 500 is no refusal: the export a late refusal left fails R6."""
        self.addCleanup(self.remove_new_targets, self.targets())
        rows = self.results(self.run_kit(self.target(LateRefusalDriver),
                                         rules=['R6']))
        for call in ('create', 'update'):
            row = rows[('R6', 'attachment_%s_refuses_bad_connectors' % call)]
            self.assertEqual(runner.FAIL, row.result, row.message)
            self.assertEqual(
                'R6 bad connector refused (attachment %s): connector '
                '{\'host\': \'conformance-bad\\ninitiator-address=ALL\'} got '
                'HTTP 500 (an error, not a refusal as such) and the probe '
                'says the volume is exported' % call, row.message)

    def test_driver_without_grant_fence_fails_r8(self):
        rows = self.results(self.run_kit(self.target(NoGrantFenceDriver),
                                         rules=['R8']))
        self.assertEqual(2, len(rows))
        self.assert_second_writer(rows)

    def write_conf(self, driver=TGT_DRIVER):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'cinder.conf')
        lines = ['[DEFAULT]', 'enabled_backends = tgt-conformance', '',
                 '[tgt-conformance]', 'volume_driver = %s' % driver]
        lines += ['%s = %s' % kv for kv in sorted(self.options().items())]
        with open(path, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        return path

    def cli(self, *args):
        return subprocess.run(
            [sys.executable, '-m', 'cinder_forcedetach.conformance',
             '--probe', 'cinder_forcedetach.conformance.probe.TgtProbe',
             '--backend', 'tgt-conformance', '--quiet'] + list(args),
            capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)

    def test_tgt_driver_passes_every_rule_through_the_cli(self):
        """The vendor's path: cinder.conf section, CLI, table, exit 0.

        Also our TgtISCSIDriver's conformance run: every row must pass but
        the truly absent capability (NOT_APPLICABLE).
        """
        before = self.targets()
        proc = self.cli('--config', self.write_conf())
        self.addDetail('stdout', testtools.content.text_content(proc.stdout))
        if os.environ.get('CONFORMANCE_TABLES'):
            with open(os.environ['CONFORMANCE_TABLES'], 'a') as f:
                f.write('\n## %s\n%s\n' % (self.id(), proc.stdout))
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr[-3000:])
        out = proc.stdout
        self.assertIn('Conformance of %s (backend tgt-conformance' %
                      TGT_DRIVER, out)
        self.assertIn('| rule | check | result | message |', out)
        rows = [line.split(' | ') for line in out.splitlines()
                if line.startswith('| R')]
        self.assertEqual(N_CHECKS, len(rows), out)
        for rule, check, result, _message in rows:
            rule = rule.lstrip('| ')
            wanted = (runner.NA if (rule, check) in NOT_APPLICABLE
                      else runner.PASS)
            self.assertEqual(wanted, result,
                             '%s %s\n%s' % (rule, check, out))
        self.assertIn('| R1 | idempotent_fence_clients | n/a | n/a '
                      '(capability', out)
        self.assertIn('%d checks: %d pass, 0 FAIL, 1 n/a -> CONFORMANT' % (
            N_CHECKS, N_CHECKS - 1), out)
        self.assertEqual(set(), self.targets() - before,
                         'the kit left targets behind')

    def test_cli_fails_a_broken_driver(self):
        proc = self.cli('--config', self.write_conf(
            'tests.functional.test_conformance.NonIdempotentRevokeDriver'),
            '--rules', 'R1')
        self.assertEqual(1, proc.returncode, proc.stdout + proc.stderr[-3000:])
        self.assertIn('| R1 | idempotent_revoke_one_host | FAIL | R1 '
                      'idempotent revoke_host_access(one host): call 2/10',
                      proc.stdout)
        self.assertIn('-> NOT CONFORMANT', proc.stdout)

    def test_cli_refuses_a_missing_section(self):
        proc = self.cli('--config', self.write_conf(), '--backend', 'nope')
        self.assertEqual(2, proc.returncode)
        self.assertIn('has no section [nope]', proc.stderr)


class FCConformanceTestCase(_KitTestCase):
    """The FC driver on the SQLite array and the emulated fabric."""

    def setUp(self):
        super(FCConformanceTestCase, self).setUp()
        tmp = self.useFixture(fixtures.TempDir()).path
        self.volumes_dir = os.path.join(tmp, 'volumes')
        self.array_db = os.path.join(tmp, 'array.sqlite')
        self.fabric = self.useFixture(fc_fabric.EmulatedFabric(
            self.array_db, self.volumes_dir, FC_TARGETS))

    def connector(self, host, protocol):
        """The connector of a host whose HBAs log in to the fabric."""
        emulated = (self.fabric.hosts.get(host) or
                    self.fabric.add_host(host, n_hbas=2))
        return {'host': host, 'ip': '127.0.0.1', 'platform': 'x86_64',
                'os_type': 'linux', 'multipath': False,
                'wwpns': list(emulated.wwpns),
                'wwnns': [h['wwnn'] for h in emulated.hbas]}

    def test_fc_driver_passes_every_rule(self):
        options = {'forcedetach_volumes_dir': self.volumes_dir,
                   'forcedetach_fc_array_db': self.array_db,
                   'forcedetach_fc_target_wwpns': ','.join(FC_TARGETS),
                   'forcedetach_fc_array_timeout': '1.0',
                   'forcedetach_device_scan_attempts': '2'}
        target = harness.Target(
            FC_DRIVER, options, probe=probe.FCArrayProbe,
            connector_factory=self.connector,
            extra_flags=fakes.zoning_flags(self.fabric.db))
        self.assert_conformant(self.run_kit(target))
        self.assertEqual({}, self.array_maps(),
                         'the kit left LUN maps behind')
        self.assertEqual(set(), self.fabric.state.zones(),
                         'the kit left zones behind')

    def array_maps(self):
        return array_sqlite.SqliteArray(self.array_db).dump()['maps']
