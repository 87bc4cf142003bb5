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

"""``cinder-forcedetach audit``: its arguments (runs: tests/functional)."""

import argparse
import io
from unittest import mock

import fixtures
from oslo_config import cfg
import testtools

from cinder_forcedetach.cmd import audit
from cinder_forcedetach.cmd import errors
from cinder_forcedetach.cmd import manage


class AuditArgumentsTestCase(testtools.TestCase):

    def parse(self, *argv):
        return manage.build_parser().parse_args(['audit'] + list(argv))

    def test_defaults(self):
        args = self.parse()
        self.assertEqual((False, 25, None, audit.DEFAULT_GRACE, None, None,
                          False),
                         (args.fix, args.fix_limit, args.case, args.grace,
                          args.backend, args.nova_file, args.no_nova))
        self.assertIs(audit.audit, args.command.func)

    def test_fix_options(self):
        args = self.parse('--fix', '--fix-limit', '3', '--case',
                          'leaked_export', '--case', 'stale_fence',
                          '--backend', 'tgt', '--no-nova', '--grace', '0')
        self.assertEqual((True, 3, ['leaked_export', 'stale_fence'], 0,
                          ['tgt'], True),
                         (args.fix, args.fix_limit, args.case, args.grace,
                          args.backend, args.no_nova))

    def test_bad_arguments_exit_1(self):
        for argv in (['--case', 'nope'], ['--fix-limit', '-1'],
                     ['--grace', 'soon'],
                     ['--nova-file', 'f', '--no-nova']):
            stderr = io.StringIO()
            code = manage.main(['audit'] + argv, stderr=stderr)
            self.assertEqual(1, code, argv)


class AuditErrorsTestCase(testtools.TestCase):

    def test_an_unexpected_error_is_1_never_4(self):
        def broken_pass(*args, **kwargs):
            raise KeyError('boom')
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.audit.scan.run', broken_pass))
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.cmd.audit._drivers',
            lambda ctxt, conf, names: ({}, {})))
        conf = argparse.Namespace(volume_name_template='volume-%s',
                                  register_opt=lambda opt: None,
                                  cluster=None)
        args = manage.build_parser().parse_args(['audit', '--no-nova'])
        err = self.assertRaises(errors.CliError, audit.audit, conf, args,
                                None)
        self.assertEqual((1, "audit failed: KeyError: 'boom'"),
                         (err.code, err.message))


class AuditNotificationsTestCase(testtools.TestCase):

    def test_each_finding_and_the_pass_are_notified(self):
        from cinder_forcedetach.audit import cases
        from cinder_forcedetach.audit import scan
        from cinder_forcedetach import notifications

        finding = cases.Finding('stuck_transition', 'v1', backend='h@tgt',
                                evidence='status detaching since then',
                                action=cases.DETACH_ALL, result='repaired')
        report = scan.Report([finding], {}, [], True)
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.audit.scan.run',
            lambda *args, **kwargs: report))
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.cmd.audit._drivers',
            lambda ctxt, conf, names: ({}, {})))
        opened = []
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.notifications.init_command', opened.append))
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.notifications.end_command',
            lambda: opened.append('closed')))
        sent = []
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.notifications.notify',
            lambda ctxt, host, event, payload: sent.append(
                (host, event, payload))))
        conf = argparse.Namespace(volume_name_template='volume-%s',
                                  register_opt=lambda opt: None,
                                  cluster=None)
        args = manage.build_parser().parse_args(
            ['--format', 'json', 'audit', '--no-nova', '--fix'])
        out = mock.Mock(fmt='json')
        self.assertEqual(audit.EXIT_REPAIRED, audit.audit(conf, args, out))
        self.assertEqual([conf, 'closed'], opened)
        row = finding.row()
        row['volume_id'] = row.pop('volume')
        self.assertEqual([('h@tgt', notifications.AUDIT_FINDING, row),
                          (None, notifications.AUDIT_PASS,
                           dict(report.summary(True), fix=True))], sent)
        self.assertEqual({'stuck_transition': 1}, sent[1][2]['by case'])


class InitCommandTestCase(testtools.TestCase):

    def test_messaging_from_the_configuration_then_closed(self):
        from cinder import rpc

        from cinder_forcedetach import notifications

        self.assertFalse(rpc.initialized())
        conf = cfg.ConfigOpts()
        conf([], project='cinder', default_config_files=[],
             default_config_dirs=[])
        notifications.init_command(conf)
        self.addCleanup(notifications.end_command)
        self.assertTrue(rpc.initialized())
        self.assertEqual(notifications.CLI_RETRY,
                         conf.oslo_messaging_notifications.retry)
        notifications.end_command()
        self.assertFalse(rpc.initialized())
