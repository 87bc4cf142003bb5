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

"""``cinder-forcedetach audit`` on Cinder's services and a real tgtd.

Live qemu-io initiators hold the volumes.
Each case is made for real where these machines allow it: an operator's
``os-reset_status`` that leaves the export, a target deleted behind
Cinder's back, an attachment of an instance Nova no longer has, a
reservation of a deleted instance.  The audit runs as the operator runs
it, a process reading a cinder.conf (its tgtadm calls go through a real
privsep daemon), then ``--fix``, then again to find nothing.

Nova: here Nova's mappings come from a JSON file as an operator exports
them (``--nova-file``).  The cases that involve Nova run against real Nova
through Cinder's ``[nova]`` client on the ``up --nova`` box
(:mod:`tests.functional.nova_audit_cases`).  Cinder's own os-complete /
attachment-delete race cannot be triggered on demand: its result (an
in-use volume without attachment row) is made by destroying the row.
"""

import json
import os
import subprocess
import sys
import uuid

from cinder import objects
from cinder.volume import volume_utils
import fixtures
from testtools import content

from cinder_forcedetach.audit import scan
from cinder_forcedetach.audit import sources
from cinder_forcedetach.conformance import sqlite_locking
from tests import fakes
from tests.functional import base

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CONF = base.CONF


class AuditTestCase(base.CinderTgtTestCase):

    def setUp(self):
        super(AuditTestCase, self).setUp()
        self.workdir = self.useFixture(fixtures.TempDir()).path
        self.nova_conf = {}

    # -- running the audit ---------------------------------------------------

    def write_cinder_conf(self, control_port=None):
        """cinder.conf of this test's volume service, for the audit."""
        path = os.path.join(self.workdir, 'cinder.conf')
        helper = '%s --config-file %s' % (
            os.path.join(sys.prefix, 'bin', 'privsep-helper'), path)
        lines = ['[DEFAULT]', 'host = %s' % self.volume.host,
                 'state_path = %s' % self.workdir,
                 '[oslo_concurrency]', 'lock_path = %s' % self.workdir,
                 '[database]', 'connection = %s' % CONF.database.connection,
                 '[coordination]',
                 'backend_url = %s' % CONF.coordination.backend_url,
                 '[cinder_sys_admin]', 'helper_command = %s' % helper,
                 '[backend_defaults]', 'volume_driver = %s' % base.DRIVER,
                 'forcedetach_tgt_control_port = %s' %
                 (control_port or self.tgtd.control_port),
                 'forcedetach_volumes_dir = %s' % self.volumes_dir,
                 'target_ip_address = 127.0.0.1',
                 'target_port = %s' % self.tgtd.port]
        if self.nova_conf:
            lines.append('[nova]')
            lines += ['%s = %s' % kv for kv in sorted(self.nova_conf.items())]
        with open(path, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        return path

    def nova_file(self, bdms=(), instances=None):
        """Nova's mappings as an operator exports them."""
        path = os.path.join(self.workdir, 'nova-%s.json' % uuid.uuid4())
        with open(path, 'w') as f:
            json.dump({'bdms': list(bdms), 'instances': instances or {}}, f)
        return path

    def audit(self, *args, conf=None):
        """(exit code, findings by case, whole JSON) of one audit run."""
        res = subprocess.run(
            [sys.executable, '-m', 'cinder_forcedetach.cmd.manage',
             '--format', 'json', 'audit', '--grace', '0'] + list(args) +
            ['--config-file', conf or self.write_cinder_conf()],
            cwd=REPO, capture_output=True, text=True, timeout=180,
            env=dict(os.environ,
                     PYTHONPATH=sqlite_locking.pythonpath(REPO)))
        self.addDetail('audit %s' % ' '.join(args),
                       content.text_content(res.stdout + res.stderr))
        try:
            data = json.loads(res.stdout)
        except ValueError:
            self.fail('audit printed no JSON (exit %d): %s %s' % (
                res.returncode, res.stdout, res.stderr[-3000:]))
        by_case = {}
        for row in data['findings']:
            by_case.setdefault(row['case'], []).append(row)
        return res.returncode, by_case, data

    # -- making cases --------------------------------------------------------

    def attach_instance(self, volume_id, host, instance=None):
        """Attach for *instance* as Nova does; a live initiator holds it."""
        att, info = self.attach(volume_id, host, instance=instance)
        session = self.login(info, host)
        return att, session

    def assert_torn_down(self, volume_id, session):
        self.assertIsNone(self.target_state(volume_id))
        self.assert_cut_off(session, 0xee, volume_id=volume_id)
        vol = self.db_volume(volume_id)
        self.assertEqual(('available', 'detached', []),
                         (vol.status, vol.attach_status,
                          [a.id for a in vol.volume_attachment]))

    def assert_clean(self, *args):
        code, by_case, data = self.audit(*args)
        self.assertEqual((0, {}), (code, by_case), data)

    # -- the cases -----------------------------------------------------------

    def test_reset_state_leaves_an_export_found_and_fixed(self):
        """The operator's mistake this project exists for."""
        vol = self.create_volume()['id']
        _att, session = self.attach_instance(vol, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        self.assertTrue(session.write(0x11), 'reset-state cut nothing off')

        code, by_case, _data = self.audit('--no-nova')
        self.assertEqual(3, code)
        self.assertEqual(['leaked_export'], list(by_case))
        (row,) = by_case['leaked_export']
        self.assertEqual(vol, row['volume'])
        self.assertIn('acl %s' % base.initiator_name('compute1'),
                      row['evidence'])
        self.assertIn('session %s' % base.initiator_name('compute1'),
                      row['evidence'])
        # a plain audit changed nothing; the control before the fix:
        self.control_write(session, 0x12)

        code, by_case, data = self.audit('--no-nova', '--fix')
        self.assertEqual(4, code, data)
        self.assertEqual('repaired', by_case['leaked_export'][0]['result'])
        self.assert_torn_down(vol, session)
        self.assert_clean('--no-nova')
        self.assert_clean('--no-nova', '--fix')

    def test_attachment_nova_forgot_is_force_detached(self):
        instance = str(uuid.uuid4())
        vol = self.create_volume()['id']
        att, session = self.attach_instance(vol, 'compute1', instance)
        nova = self.nova_file()        # the instance is gone from Nova

        code, by_case, _data = self.audit('--nova-file', nova)
        self.assertEqual((3, ['attachment_without_bdm']),
                         (code, list(by_case)))
        row = by_case['attachment_without_bdm'][0]
        self.assertEqual((att['id'], instance, 'compute1'),
                         (row['attachment'], row['instance'], row['host']))

        code, by_case, data = self.audit('--nova-file', nova, '--fix')
        self.assertEqual(4, code, data)
        self.assert_torn_down(vol, session)
        self.assert_clean('--nova-file', nova, '--fix')

    def test_mapping_cinder_forgot_is_reported_not_touched(self):
        """A mapping Cinder forgot is Nova's; a deleted's reservation ours."""
        vol = self.create_volume()['id']
        reserved_vol = self.create_volume()['id']
        gone = str(uuid.uuid4())
        reserved = self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': reserved_vol, 'instance_uuid': gone}})[
            'attachment']
        forgotten = str(uuid.uuid4())
        server = str(uuid.uuid4())
        nova = self.nova_file(bdms=[{
            'instance_uuid': server, 'volume_id': vol,
            'attachment_id': forgotten, 'vm_state': 'active',
            'host': 'compute2'}])

        code, by_case, data = self.audit('--nova-file', nova, '--fix')
        self.assertEqual(3, code, data)
        self.assertEqual({'bdm_without_attachment', 'reserved_orphan'},
                         set(by_case))
        row = by_case['bdm_without_attachment'][0]
        self.assertEqual((vol, forgotten, server),
                         (row['volume'], row['attachment'], row['instance']))
        self.assertTrue(row['result'].startswith('refused: Nova'), row)
        row = by_case['reserved_orphan'][0]
        self.assertEqual((reserved['id'], 'repaired'),
                         (row['attachment'], row['result']))
        self.assertEqual('available', self.db_volume(reserved_vol).status)
        self.assertEqual(
            0, len(self.db_volume(reserved_vol).volume_attachment))
        code, by_case, _data = self.audit('--nova-file', nova, '--fix')
        self.assertEqual((3, ['bdm_without_attachment']),
                         (code, list(by_case)))

    def test_unreachable_sources_exit_5(self):
        vol = self.create_volume()['id']
        self.attach_instance(vol, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        # tgtd's control port answers nothing: the backend is unreachable.
        free = fakes.free_tcp_ports(1)[0]
        code, by_case, data = self.audit(
            '--no-nova', conf=self.write_cinder_conf(control_port=free))
        self.assertEqual((5, {}), (code, by_case), data)
        self.assertEqual({'backend %s unreachable' % self.volume.host: 1},
                         data['summary']['not audited'])
        self.assertIn('backend %s' % self.volume.host,
                      data['summary']['unreachable'][0])
        # Nova unreachable: what Cinder and the backend show is printed.
        self.nova_conf = {'auth_type': 'password',
                          'auth_url': 'http://127.0.0.1:%d/identity/v3' %
                                      free,
                          'username': 'cinder', 'password': 'secret',
                          'project_name': 'service',
                          'user_domain_name': 'Default',
                          'project_domain_name': 'Default'}
        code, by_case, data = self.audit()
        self.assertEqual((5, ['leaked_export'], False),
                         (code, list(by_case),
                          data['summary']['nova consulted']))
        self.assertTrue(data['summary']['unreachable'][0].startswith(
            'Nova: '), data['summary'])
        self.assertNotIn('secret', json.dumps(data))

    def test_target_lost_behind_cinders_back(self):
        vol = self.create_volume()['id']
        att, _session = self.attach_instance(vol, 'compute1')
        state = self.target_state(vol)
        self.tgtd.tgtadm('--op', 'delete', '--mode', 'target', '--tid',
                         str(state.tid), '--force')

        code, by_case, _data = self.audit('--no-nova')
        self.assertEqual((3, ['attached_not_exported']),
                         (code, list(by_case)))
        self.assertEqual(att['id'], by_case['attached_not_exported'][0][
            'attachment'])
        code, _by_case, data = self.audit('--no-nova', '--fix')
        self.assertEqual(4, code, data)
        vol_row = self.db_volume(vol)
        self.assertEqual(('available', []), (
            vol_row.status, [a.id for a in vol_row.volume_attachment]))
        self.assert_clean('--no-nova')

    def test_in_use_without_attachment_row(self):
        vol = self.create_volume()['id']
        att, session = self.attach_instance(vol, 'compute1')
        objects.VolumeAttachment.get_by_id(self.ctxt, att['id']).destroy()
        self.assertEqual('in-use', self.db_volume(vol).status)

        code, by_case, _data = self.audit('--no-nova')
        self.assertEqual(3, code)
        self.assertEqual({'in_use_without_attachment', 'leaked_export'},
                         set(by_case))
        code, by_case, data = self.audit('--no-nova', '--fix')
        self.assertEqual(4, code, data)
        self.assert_torn_down(vol, session)
        self.assert_clean('--no-nova')

    def test_fix_limit_then_rerun(self):
        sessions = {}
        for host in ('compute1', 'compute2', 'compute3'):
            vol = self.create_volume()['id']
            _att, sessions[vol] = self.attach_instance(vol, host)
            self.reset_status(vol, status='available',
                              attach_status='detached')

        code, by_case, data = self.audit('--no-nova', '--fix',
                                         '--fix-limit', '1')
        self.assertEqual(3, code, data)
        results = sorted(r['result'] for r in by_case['leaked_export'])
        self.assertEqual(['over the fix limit (1)'] * 2 + ['repaired'],
                         results)
        code, by_case, data = self.audit('--no-nova', '--fix')
        self.assertEqual(4, code, data)
        self.assertEqual(2, len(by_case['leaked_export']))
        for vol, session in sessions.items():
            self.assert_torn_down(vol, session)
        self.assert_clean('--no-nova')

    def test_crash_during_fix_then_rerun_converges(self):
        """The process running --fix dies after the target is removed.

        In a forked child (the pass the command runs, in this process's
        services) that exits at once after ``remove_export``; the re-run
        finishes: DB reset, nothing left.
        """
        vol = self.create_volume()['id']
        _att, session = self.attach_instance(vol, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        backend = volume_utils.extract_host(self.volume.host, 'backend')

        def audit_pass(**kwargs):
            return scan.run(self.ctxt, {backend: self.driver},
                            CONF.volume_name_template,
                            sources.backend_resolver(None, [backend]),
                            **kwargs).findings

        real = self.driver.remove_export_unlocked

        def crashing(*args, **kwargs):
            real(*args, **kwargs)
            os._exit(base.CRASH_EXIT)

        def run():
            self.driver.remove_export_unlocked = crashing
            audit_pass(fix=True)
        base.crash_in_child(self, run)
        self.assertIsNone(self.target_state(vol))
        # The record of the hosts being revoked (null: every host) survived.
        self.assertEqual('[null]', self.db_volume(vol).admin_metadata.get(
            'forcedetach_teardown'))

        self.assertEqual(['repaired'],
                         [f.result for f in audit_pass(fix=True)])
        self.assert_torn_down(vol, session)
        self.assertNotIn('forcedetach_teardown',
                         self.db_volume(vol).admin_metadata)
        self.assertEqual([], audit_pass(fix=True))
