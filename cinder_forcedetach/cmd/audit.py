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

"""``cinder-forcedetach audit``: dangling attachments, found and repaired.

Usage::

    cinder-forcedetach [--format table|json] audit [--fix]
        [--fix-limit N] [--case CASE]... [--grace SECONDS]
        [--backend NAME]... [--nova-file FILE | --no-nova]
        [--config-file FILE]... [--config-dir DIR] [--debug]

Runs where ``cinder-manage`` runs: reads cinder.conf, Cinder's database,
each enabled backend through its driver (or those named by ``--backend``)
and Nova through its API with Cinder's ``[nova]`` service credentials
(``--nova-file``: mappings exported to JSON instead; ``--no-nova``: skip
the cases that need Nova, and refuse repairs of instances' attachments).
Prints one row per finding (case, volume, attachment, instance, host,
backend, evidence, repair, result), then a summary.  ``--fix`` repairs up
to ``--fix-limit`` findings (default 25) through the force-detach flow;
volumes changed within ``--grace`` seconds (default 600) are left for the
next run.  The cases: ``doc/audit.md``.

Exit codes (as ``nova-manage placement audit``): 0 nothing found, 3
found (and not all repaired), 4 everything found was repaired, 1 bad input
or an error, 5 a source unreachable (Cinder's database, a backend, Nova).
"""

from cinder_forcedetach.audit import cases
from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.cmd import local
from cinder_forcedetach.cmd import registry
from cinder_forcedetach.cmd.registry import arg

EXIT_CLEAN = 0
EXIT_ERROR = 1
EXIT_FOUND = 3
EXIT_REPAIRED = 4
EXIT_UNREACHABLE = 5
DEFAULT_GRACE = cases.DEFAULT_GRACE

HELP = ('Find attachments Cinder, the backends and Nova disagree on; '
        'repair them with --fix (runs locally, reads cinder.conf).')


registry.category('audit', HELP)


def _positive(value):
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


@registry.command(
    'audit', None, HELP, local=True, what='audit',
    arguments=[
        arg('--fix', action='store_true',
            help='repair what was found (backend teardown first, then '
                 'Cinder\'s rows)'),
        arg('--fix-limit', type=_positive, default=cases.DEFAULT_FIX_LIMIT,
            metavar='N', help='repair at most N findings (default %d)' %
                              cases.DEFAULT_FIX_LIMIT),
        arg('--case', action='append', choices=list(cases.CASES),
            metavar='CASE', help='repair only this case (repeatable; one '
                                 'of %s)' % ', '.join(cases.CASES)),
        arg('--grace', type=_positive, default=DEFAULT_GRACE,
            metavar='SECONDS',
            help='leave volumes changed in the last SECONDS (default %d)' %
                 DEFAULT_GRACE),
        arg('--backend', action='append', metavar='NAME',
            help='audit this backend (cinder.conf section; repeatable; '
                 'default: every enabled backend)'),
        registry.exclusive(
            arg('--nova-file', metavar='FILE',
                help='Nova\'s mappings as JSON instead of its API'),
            arg('--no-nova', action='store_true',
                help='do not consult Nova')),
    ])
def audit(conf, args, out):
    """Read, classify, repair with --fix; print the plan and its results."""
    # Cinder's context, RPC and engine (the repairs' flow) are imported
    # here, not when the CLI loads: every other command starts without.
    from cinder import context

    from cinder_forcedetach import notifications

    ctxt = context.get_admin_context()
    notifications.init_command(conf)
    try:
        return _audit(ctxt, conf, args, out)
    finally:
        notifications.end_command()


def _audit(ctxt, conf, args, out):
    from cinder_forcedetach.audit import scan
    from cinder_forcedetach.audit import sources
    from cinder_forcedetach import notifications

    drivers, broken = _drivers(ctxt, conf, args.backend)
    if args.nova_file:
        try:
            nova = sources.read_nova_file(args.nova_file)
        except ValueError as err:
            raise CliError(EXIT_ERROR, str(err))

        def read_nova():
            return nova
    elif args.no_nova:
        read_nova = None
    else:
        def read_nova():
            return sources.read_nova_api(ctxt)
    try:
        report = scan.run(
            ctxt, drivers, conf.volume_name_template,
            sources.backend_resolver(local.cluster_of(conf),
                                     list(drivers) + list(broken)),
            read_nova=read_nova, grace=args.grace, fix=args.fix,
            limit=args.fix_limit, only=args.case, broken=broken)
    except sources.Unreachable as err:
        raise CliError(EXIT_UNREACHABLE, str(err))
    except Exception as err:
        # Not local.run's 4, which for the audit means "all repaired".
        raise CliError(EXIT_ERROR, 'audit failed: %s: %s' % (
            type(err).__name__, err))
    rows = [f.row() for f in report.findings]
    for finding, row in zip(report.findings, rows):
        # Named volume_id, as in every notification of ours.
        notifications.notify(ctxt, finding.backend,
                             notifications.AUDIT_FINDING,
                             {'volume_id' if key == 'volume' else key: value
                              for key, value in row.items()})
    notifications.notify(ctxt, None, notifications.AUDIT_PASS,
                         dict(report.summary(args.fix), fix=args.fix))
    if out.fmt == 'json':
        out.emit({'findings': rows, 'summary': report.summary(args.fix)})
    else:
        out.emit_list(rows, cases.COLUMNS)
        out.emit(report.summary(args.fix))
    if report.unreachable:
        return EXIT_UNREACHABLE
    if not report.findings:
        return EXIT_CLEAN
    if args.fix and all(f.result == cases.REPAIRED
                        for f in report.findings):
        return EXIT_REPAIRED
    return EXIT_FOUND


def _drivers(ctxt, conf, names):
    """Drivers of the backends to audit, and why others could not be built.

    Returns ``({host@backend: driver}, {host@backend: error})``.
    """
    drivers, broken = {}, {}
    for group, backend_host in local.backends(names):
        try:
            driver = local.command_driver(ctxt, group, backend_host,
                                          local.cluster_of(conf))
        except Exception as err:
            broken[backend_host] = 'driver setup: %s: %s' % (
                type(err).__name__, err)
        else:
            drivers[backend_host] = driver
    return drivers, broken
