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

"""``python -m cinder_forcedetach.conformance``: run the kit on a driver.

Exit status 0 when every applicable check passes, 1 otherwise, 2 on a
usage or configuration error.
"""

import argparse
import os
import sys

from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import runner
from cinder_forcedetach.conformance import suite


def rule_list():
    """The rules, one a line, for --help."""
    rules = sorted(suite.RULES, key=lambda rule: int(rule[1:]))
    lines = ['  %-4s %s' % (rule, suite.RULES[rule]) for rule in rules]
    return 'rules:\n' + '\n'.join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog='python -m cinder_forcedetach.conformance',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description='Conformance kit for ForceDetachMixin drivers: runs '
                    'Cinder (API, scheduler, volume service) in-process '
                    'on your driver and checks rules R1-R%d.' % len(
                        suite.RULES),
        epilog=rule_list() + '\n\nSee doc/vendor-guide.md.')
    parser.add_argument('--driver', help='driver class, module.Class '
                        '(default: volume_driver of the backend section)')
    parser.add_argument('--config', required=True,
                        help='cinder.conf holding the backend section')
    parser.add_argument('--backend', required=True,
                        help='the backend section of --config')
    parser.add_argument('--probe', required=True,
                        help='your AccessProbe subclass, module.Class')
    parser.add_argument('--capabilities', default=None,
                        help='comma-separated: multiattach, fencing, '
                             'iscsi|fc|rbd; no-X declares X absent '
                             '(default: the driver class attribute '
                             'conformance_capabilities, then derived)')
    parser.add_argument('--rules', default=None,
                        help='only these rules, e.g. R1,R2')
    parser.add_argument('--details', action='store_true',
                        help='print the traceback of every FAIL')
    parser.add_argument('--quiet', action='store_true',
                        help='no progress lines, only the table')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Our own modules import from this checkout, as the vendor's do from
    # theirs: the current directory is importable, as with `python -m`.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target = harness.Target.from_config(
            args.config, args.backend, driver=args.driver, probe=args.probe,
            capabilities=args.capabilities)
        target.driver_class
        target.get_probe()
    except (ValueError, ImportError, AttributeError, TypeError) as err:
        print('conformance: %s' % err, file=sys.stderr)
        return 2
    rules = args.rules.split(',') if args.rules else None

    def progress(row):
        if not args.quiet:
            print('%-4s %-45s %-5s %5.1fs' % (
                row.rule, row.check, row.result, row.seconds), flush=True)

    rows = runner.run(target, rules=rules, progress=progress)
    print('\nConformance of %s (backend %s, probe %s, capabilities %s)\n' % (
        target.driver_path, args.backend, args.probe,
        ', '.join('%s=%s' % kv for kv in sorted(
            (target.resolved or target.capabilities()).items()))))
    if target.ignored_options:
        print('Options of [%s] no registered option matched (ignored): %s\n'
              % (args.backend, ', '.join(target.ignored_options)))
    print(runner.table(rows))
    failed = [row for row in rows if row.result == runner.FAIL]
    if failed:
        print('\nFailures, in full:')
        for row in failed:
            print('- %s %s: %s' % (row.rule, row.check, row.message))
    if args.details:
        for row in rows:
            if row.result == runner.FAIL and row.details:
                print('\n--- %s %s\n%s' % (row.rule, row.check, row.details))
    return 0 if runner.passed(rows) else 1


if __name__ == '__main__':
    sys.exit(main())
