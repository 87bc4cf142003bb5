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


class ClusterOptionTestCase(testtools.TestCase):

    def test_cluster_read_from_the_file_without_cinder_volume(self):
        """The volume services' cluster, which the command never imports."""
        conf_file = self.useFixture(fixtures.TempDir()).join('cinder.conf')
        with open(conf_file, 'w') as f:
            f.write('[DEFAULT]\ncluster = box\n')
        conf = cfg.ConfigOpts()
        conf(['--config-file', conf_file], project='cinder')
        self.assertEqual('box', audit._cluster(conf))
        self.assertEqual('box', audit._cluster(conf))   # registered once

    def test_no_cluster(self):
        conf = cfg.ConfigOpts()
        conf([], project='cinder', default_config_files=[],
             default_config_dirs=[])
        self.assertIsNone(audit._cluster(conf))
