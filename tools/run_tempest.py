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

"""Real tempest against the box: the volume API tests on our drivers.

``tempest.api.volume``, ``cinder_tempest_plugin.api.volume`` and
``tempest.api.compute.volumes`` on Nova's fake virt driver, one box on
our tgt driver and one on our RBD driver; and ``tempest.api.compute.volumes``
again on Nova's libvirt driver (the ``libvirt`` run: qemu TCG guests booted
from the box's image, our RBD volumes attached as qemu's own librbd disks).

Each run starts ``tools/stack.sh up --nova`` (Keystone, Glance, MariaDB,
Nova, placement, Neutron without agents) in its own state directory
(unless ``--state-dir`` names such a running box), uploads two small raw
images through Glance (the libvirt run uses the box's own image), writes a
tempest workspace there (``tempest init``, a ``tempest.conf`` made from
the box: the admin account for dynamic credentials, the catalog, the
images and the box's flavors, Neutron and validation off), and runs::

    tempest run --regex '^(tempest|cinder_tempest_plugin)\\.api\\.volume|
                         ^tempest\\.api\\.compute\\.volumes'
        --exclude-list tools/tempest-exclude.txt

(the libvirt run: ``--regex '^tempest\\.api\\.compute\\.volumes'``).
Every excluded test is listed with its reason in
``tools/tempest-exclude.txt``, every test tempest skips in
``tools/tempest-skips.txt`` with the runs (``tgt``, ``rbd``, ``libvirt``,
``both`` for the first two, ``all``) that skip it.  Prints tempest's
summary and one line::

    tempest: ran N, passed P, skipped S, failed F (SECONDS s)

in which a class tempest skips as a whole (its ``setUpClass`` skipped,
one entry in tempest's own summary) counts as the tests of that class
(``tempest run --list-tests`` with the run's regex and exclude list).
Exits 0 only with no failure, no skip the list does not give for that
run and, with the default regexes, no listed skip that a run it names did
not produce.  The box is stopped at the end unless ``--keep``
(or ``--state-dir`` was given).

The workers are balanced by each test's time in an earlier run
(``tools/tempest-times/BACKEND.txt``, loaded into the workspace's stestr
repository before the run, as a previous run's would be): without it
stestr deals classes round robin, and one worker ran 2 to 3 minutes longer
than the other.  ``--record-times`` writes the run's times there.

Usage (from the repository root)::

    .venv/bin/python tools/run_tempest.py [--regex '^tempest\\.api\\.volume']
        [--concurrency 2] [--state-dir DIR] [--keep] [--record-times]
"""

import argparse
from concurrent import futures
import configparser
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from devbox import boxutil  # noqa: E402
from devbox.services import cinder  # noqa: E402
from devbox.services import neutron  # noqa: E402
from devbox.services import nova  # noqa: E402
from devbox import stack as stack_mod  # noqa: E402
from tests import fakes  # noqa: E402
from tests.support import id_lists  # noqa: E402

STACK_SH = os.path.join(REPO, 'tools', 'stack.sh')
EXCLUDE = os.path.join(REPO, 'tools', 'tempest-exclude.txt')
SKIPS = os.path.join(REPO, 'tools', 'tempest-skips.txt')
TIMES = os.path.join(REPO, 'tools', 'tempest-times')
# One run's report at a time (the backends' runs go side by side).
_PRINT_LOCK = threading.Lock()
# What went wrong outside the tests (a box that did not come up): printed
# again last, where a log's tail shows it.
PROBLEMS = []
SKIP_LINE = re.compile(r'^\{\d+\} (?:setUpClass \((\S+)\)|(\S+?)(?:\[\S*\])?)'
                       r'(?: \[[\d.]+s\])? \.\.\. SKIPPED', re.MULTILINE)
# The runs a line of tools/tempest-skips.txt can name.
BACKENDS = ('tgt', 'rbd', 'libvirt')
SKIP_RUNS = dict({run: frozenset([run]) for run in BACKENDS},
                 both=frozenset(['tgt', 'rbd']), all=frozenset(BACKENDS))
FAILED_LINE = re.compile(r'^\{\d+\} (?:setUpClass \((\S+)\)|(\S+?))'
                         r'(?:\[\S*\])?(?: \[[\d.]+s\])? \.\.\. FAILED',
                         re.MULTILINE)
# A passed test's line in tempest's output (subunit-trace drops the tags).
PASSED_LINE = re.compile(
    r'^\{\d+\} (\S+?)(?:\[\S*\])? \[([\d.]+)s\] \.\.\. ok$', re.MULTILINE)
DEFAULT_BACKENDS = 'tgt,rbd,libvirt'
# The tgt box has two tgt backends: multi-backend and retype with
# migration (a file copy between the two stores) run there.  The libvirt
# run's box is on our RBD driver.
BOX_BACKENDS = {'tgt': 'tgt,tgt2', 'libvirt': 'rbd'}
DEFAULT_REGEX = (r'^(tempest|cinder_tempest_plugin)\.api\.volume|'
                 r'^tempest\.api\.compute\.volumes')
# The libvirt run: the tests that boot guests and attach volumes to them
# (its guests run under TCG; the volume API tests ran on the fake driver).
REGEXES = {'libvirt': r'^tempest\.api\.compute\.volumes'}


def box_env(state, backend):
    """A fresh --nova box on free loopback ports, for run *backend*.

    ``libvirt``: Nova's libvirt driver on our RBD driver.
    """
    backends = BOX_BACKENDS.get(backend, backend)
    env = fakes.box_env(state, nova=True, ceph='rbd' in backends.split(','))
    env['STACK_BACKENDS'] = backends
    if backend == 'libvirt':
        env['STACK_VIRT'] = 'libvirt'
    # main() ran the install step once (tools/stack.sh install).
    env['STACK_SKIP_INSTALL'] = '1'
    if backend == 'rbd':
        # A backup attaches its volume on the backup host: an RBD volume
        # through librbd; an iSCSI one would need the kernel initiator.
        env['STACK_BACKUP'] = '1'
    return env


def upload_image(box):
    """A public 1 MiB raw image in the box's Glance, as the admin."""
    return box.service('glance-api').upload(
        box.ctx, 'cfd-tempest', os.urandom(1 << 20), visibility='public')


def images(box, backend):
    """(image_ref, image_ref_alt) for run *backend*.

    The libvirt run boots guests: the box's own image (public; its kernel
    and initramfs are images of their own), both times.  Nova's fake
    driver boots nothing: two images of random bytes.
    """
    if backend == 'libvirt':
        image = box.service('nova').image_id(box.ctx)
        return image, image
    return upload_image(box), upload_image(box)


def write_conf(state, workspace, image_id, image_alt_id):
    """tempest.conf from the running box (stack.json, secrets.json)."""
    with open(os.path.join(state, 'stack.json')) as f:
        info = json.load(f)
    with open(os.path.join(state, 'secrets.json')) as f:
        password = json.load(f)['admin_password']
    keystone = 'http://%s:%d/v3' % (info['host'], info['keystone_port'])
    backends = [name for name, _driver in info['backends']]
    rbd = all(driver == cinder.RBD_DRIVER
              for _name, driver in info['backends'])
    conf = configparser.RawConfigParser()
    conf['DEFAULT'] = {'log_dir': workspace, 'log_file': 'tempest.log'}
    conf['auth'] = {
        'admin_username': 'admin', 'admin_password': password,
        'admin_project_name': 'admin', 'admin_domain_name': 'Default',
        'use_dynamic_credentials': 'True',
        # Servers go on the box's shared network: tempest making its own
        # was refused create_network by Neutron's policy, as the admin,
        # in one class of a run (CI22); not seen since, cause not found.
        'create_isolated_networks': 'False'}
    conf['identity'] = {'uri_v3': keystone, 'auth_version': 'v3',
                        'region': boxutil.REGION}
    conf['identity-feature-enabled'] = {'api_v2': 'False'}
    flavor, flavor_alt = [f[1] for f in nova.FLAVORS]
    conf['compute'] = {'image_ref': image_id, 'image_ref_alt': image_alt_id,
                       'fixed_network_name': neutron.NETWORK,
                       'flavor_ref': flavor, 'flavor_ref_alt': flavor_alt,
                       'region': boxutil.REGION, 'build_timeout': '180',
                       'min_compute_nodes': '1',
                       'max_microversion': 'latest'}
    # Nova's fake virt driver: no console, no guest to reach over SSH.
    conf['compute-feature-enabled'] = {
        'console_output': 'False', 'attach_encrypted_volume': 'False',
        'volume_multiattach': 'True', 'shelve': 'True',
        'interface_attach': 'False', 'vnc_console': 'False',
        # A resize stays on the one compute (allow_resize_to_same_host).
        'resize': 'True'}
    conf['validation'] = {'run_validation': 'False'}
    conf['service_available'] = {
        'cinder': 'True', 'glance': 'True', 'nova': 'True',
        'neutron': 'True', 'swift': 'False', 'placement': 'True'}
    # Tenant networks and routers are real Neutron's (ML2, VXLAN); no
    # agent forwards packets, so nothing is reachable from outside.
    conf['network'] = {'project_network_cidr': '10.100.0.0/16',
                       'project_networks_reachable': 'False',
                       'region': boxutil.REGION}
    conf['volume'] = {
        'catalog_type': 'block-storage', 'region': boxutil.REGION,
        'storage_protocol': 'ceph' if rbd else 'iSCSI',
        'vendor_name': 'Open Source',
        'backend_names': ','.join(backends), 'build_timeout': '180',
        # The box's multiattach type (Cinder takes multiattach from a type).
        'volume_type_multiattach': 'multiattach',
        'max_microversion': 'latest'}
    # Our drivers (the file-backed ones and upstream's RBD) name a snapshot
    # snapshot-<id>; tempest's default ref, _snapshot-<id>, is LVM's name.
    conf['volume']['manage_snapshot_ref'] = 'source-name,snapshot-%s'
    conf['volume-feature-enabled'] = {
        'multi_backend': str(len(backends) > 1),
        'backup': str(bool(info.get('backup'))),
        'manage_volume': 'True', 'manage_snapshot': 'True',
        'extend_attached_volume': 'True', 'volume_revert': 'True'}
    path = os.path.join(workspace, 'etc', 'tempest.conf')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        conf.write(f)
    return path


def summary(output):
    """(ran, passed, skipped, failed) from tempest's stestr summary."""
    def count(label):
        found = re.search(r'^ - %s: (\d+)' % label, output, re.MULTILINE)
        return int(found.group(1)) if found else 0
    passed, skipped, failed = (count('Passed'), count('Skipped'),
                               count('Failed'))
    return passed + skipped + failed, passed, skipped, failed


def parse_skips(lines, path=SKIPS):
    """``{id: (runs, reason)}`` from ``tools/tempest-skips.txt``'s *lines*.

    A line is ``<test or class id> | <runs> | <reason>``, *runs* one of
    :data:`SKIP_RUNS` or a comma list of runs; *runs* is the frozenset of
    the runs (``tgt``, ``rbd``, ``libvirt``) that skip it.
    Blank lines and ``#`` comments are skipped; a line without the three
    fields, another run name, an empty reason or an id listed twice is a
    ValueError naming *path* and the line.
    """
    skips = {}
    for where, test_id, run, reason in id_lists.read_id_lines(
            lines, path, '<id> | <runs> | <reason>'):
        names = [name.strip() for name in run.split(',')]
        unknown = [name for name in names if name not in SKIP_RUNS]
        if unknown:
            raise ValueError('%s: %s: the run is one of %s, not %r' % (
                where, test_id, ', '.join(sorted(SKIP_RUNS)), unknown[0]))
        skips[test_id] = (frozenset().union(*(SKIP_RUNS[name]
                                              for name in names)), reason)
    return skips


def listed_skips(path=SKIPS):
    """``{id: (runs, reason)}`` of the file *path*."""
    with open(path) as f:
        return parse_skips(f, os.path.relpath(path, REPO))


def skip_events(output):
    """(test ids, class ids) tempest skipped in *output*.

    A class id is a class skipped as a whole: ``setUpClass (<class id>)
    ... SKIPPED``, one entry for all its tests.
    """
    tests, classes = set(), set()
    for class_id, test_id in SKIP_LINE.findall(output):
        if class_id:
            classes.add(class_id)
        else:
            tests.add(test_id)
    return tests, classes


def skipped_ids(output):
    """Ids (tests or classes) tempest skipped in *output*."""
    tests, classes = skip_events(output)
    return tests | classes


def unlisted_skips(backend, skipped, skips):
    """The ids of *skipped* in the run on *backend* with no reason there.

    :returns: sorted ``(id, why)``: not listed at all, or listed for the
        other backend's run only.
    """
    problems = []
    for test_id in sorted(skipped):
        if test_id not in skips:
            problems.append((test_id, 'not listed'))
        elif backend not in skips[test_id][0]:
            problems.append((test_id, 'listed for the %s run only' % (
                '/'.join(sorted(skips[test_id][0])))))
    return problems


def unproduced_skips(skips, produced):
    """The listed skips a run the line names did not produce.

    *produced* maps each backend that ran (the default regex) to the ids
    its run skipped; a line naming a backend that did not run is not
    checked for it.  Returns sorted ``(id, backend)``.
    """
    return sorted((test_id, backend)
                  for test_id, (runs, _reason) in skips.items()
                  for backend in runs
                  if backend in produced and test_id not in produced[backend])


def class_test_counts(class_ids, listed_tests):
    """``{class id: its tests}`` among *listed_tests*.

    *listed_tests*: the ids ``tempest run --list-tests`` printed for the
    run's selection (``[attributes]`` tails are dropped).  A class with no
    listed test counts as 1: tempest's own count for its setUpClass skip.
    """
    counts = dict.fromkeys(class_ids, 0)
    for line in listed_tests:
        test_id = line.strip().split('[', 1)[0]
        class_id = test_id.rpartition('.')[0]
        if class_id in counts:
            counts[class_id] += 1
    return {class_id: count or 1 for class_id, count in counts.items()}


def count_class_skips(counts, class_counts):
    """(ran, passed, skipped, failed) with each class skip as its tests.

    *counts* is tempest's summary, in which each class skipped in its
    setUpClass is one skip; *class_counts* ``{class id: its tests}``.
    """
    _ran, passed, skipped, failed = counts
    skipped += sum(class_counts.values()) - len(class_counts)
    return passed + skipped + failed, passed, skipped, failed


def list_tests(workspace, conf, regex, env, venv_bin):
    """The test ids ``tempest run --list-tests`` selects, or None."""
    listing = subprocess.run(
        [os.path.join(venv_bin, 'tempest'), 'run', '--list-tests',
         '--config-file', conf, '--regex', regex, '--exclude-list', EXCLUDE],
        cwd=workspace, env=env, capture_output=True, text=True)
    if listing.returncode:
        sys.stderr.write(listing.stderr[-3000:])
        return None
    return [line.strip() for line in listing.stdout.splitlines()
            if line.strip() and ' ' not in line.strip()]


def box_backend(state):
    """``libvirt``, ``rbd`` or ``tgt``: the run a box in *state* makes."""
    with open(os.path.join(state, 'stack.json')) as f:
        info = json.load(f)
    if info.get('virt') == 'libvirt':
        return 'libvirt'
    return ('rbd' if all(driver == cinder.RBD_DRIVER
                         for _name, driver in info['backends']) else 'tgt')


def bring_up(state, backend, report):
    """``tools/stack.sh up`` in *state*, and once more after a purge.

    Each try is a fresh box on freshly reserved ports (a port another box
    took since would fail it again).  A box that fails to come up twice
    fails the run; one that needed the second try says so, with the first
    try's error, in *report* and in :data:`PROBLEMS` (the run's closing
    lines).  Returns the environment of the box that came up, or None.
    """
    for attempt in (1, 2):
        os.makedirs(state, exist_ok=True)
        env = box_env(state, backend)
        up = subprocess.run([STACK_SH, 'up'], env=env, capture_output=True,
                            text=True, timeout=900)
        if not up.returncode:
            return env
        why = up.stderr.strip().splitlines()[-12:]
        problem = ('tempest[%s]: the box did not come up (try %d of 2): %s'
                   % (backend, attempt, '\n    '.join(why)))
        report.append(problem)
        PROBLEMS.append(problem)
        subprocess.run([STACK_SH, 'down', '--purge'], env=env,
                       capture_output=True, timeout=300)
    return None


def untagged(test_id):
    """A tempest test id without its ``[id-...,smoke]`` tags."""
    return test_id.split('[', 1)[0]


def test_times(output):
    """``{untagged id: seconds}`` of the tests *output* shows passing."""
    return {test_id: float(secs)
            for test_id, secs in PASSED_LINE.findall(output)}


def times_path(backend):
    return os.path.join(TIMES, '%s.txt' % backend)


def read_times(backend):
    """``{untagged id: seconds}`` recorded for *backend*'s run, or {}."""
    try:
        with open(times_path(backend)) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    return {test_id: float(secs) for secs, test_id in
            (line.split() for line in lines if line.strip())}


def write_times(backend, times):
    os.makedirs(TIMES, exist_ok=True)
    with open(times_path(backend), 'w') as f:
        f.writelines('%.3f %s\n' % (times[t], t) for t in sorted(times))


def seed_times(workspace, listed, times, env, venv_bin):
    """Load *times* of the *listed* ids into the workspace's repository.

    A subunit stream of one passed run, as stestr stores a run it ran:
    its scheduler then balances the workers by these times (tests it has
    no time for are dealt round robin).  Returns how many were loaded,
    or None if stestr refused the stream.
    """
    import datetime

    from subunit import v2

    known = [(t, times[untagged(t)]) for t in listed if untagged(t) in times]
    path = os.path.join(workspace, 'recorded-times.subunit')
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    with open(path, 'wb') as f:
        stream = v2.StreamResultToBytes(f)
        for test_id, secs in known:
            stream.status(test_id=test_id, test_status='inprogress',
                          timestamp=start)
            stream.status(test_id=test_id, test_status='success',
                          timestamp=start + datetime.timedelta(seconds=secs))
    loaded = subprocess.run(
        [os.path.join(venv_bin, 'stestr'), 'load', '--force-init', path],
        cwd=workspace, env=env, capture_output=True, text=True)
    return None if loaded.returncode else len(known)


def run_one(args, backend, state_dir=None):
    """One box on *backend* (or the running box in *state_dir*), one run.

    Returns (ran, passed, skipped, failed, seconds, ok, skipped ids), a
    class skipped as a whole counted as its tests.  What it prints comes
    in one block at the end (runs on several backends go side by side).
    """
    report = []
    venv_bin = os.path.join(REPO, '.venv', 'bin')
    own_box = not state_dir
    state = state_dir or tempfile.mkdtemp(prefix='cfd-tempest-%s-' % backend)
    env = None if own_box else dict(os.environ, STACK_DIR=state)
    try:
        if own_box:
            env = bring_up(state, backend, report)
            if env is None:
                return 0, 0, 0, 0, 0, False, set()
        workspace = os.path.join(state, 'tempest')
        if not os.path.isdir(workspace):
            # Its own workspace registry: tempest refuses a second
            # workspace of the same name in the user's one.
            subprocess.run([os.path.join(venv_bin, 'tempest'), 'init',
                            '--workspace-path',
                            os.path.join(state, 'workspaces.yaml'),
                            workspace], check=True, capture_output=True)
        box = stack_mod.Stack(stack_mod.Settings(argparse.Namespace(
            state_dir=state)))
        conf = write_conf(state, workspace, *images(box, backend))
        run_env = dict(env, PATH=venv_bin + ':' + env['PATH'])
        regex = args.regex or REGEXES.get(backend, DEFAULT_REGEX)
        listed = None
        times = read_times(backend)
        if times:
            listed = list_tests(workspace, conf, regex, run_env, venv_bin)
            seeded = seed_times(workspace, listed or [], times, run_env,
                                venv_bin)
            report.append('tempest[%s]: workers balanced by the times of '
                          '%s of %d tests (%s)' % (
                              backend, seeded, len(listed or []),
                              os.path.relpath(times_path(backend), REPO)))
        started = time.monotonic()
        run = subprocess.run(
            [os.path.join(venv_bin, 'tempest'), 'run', '--config-file', conf,
             '--regex', regex, '--exclude-list', EXCLUDE,
             '--concurrency', str(args.concurrency)],
            cwd=workspace, env=run_env, capture_output=True, text=True)
        seconds = time.monotonic() - started
        report.append(run.stdout[-20000:].rstrip('\n'))
        for test_id in sorted({a or b for a, b in
                               FAILED_LINE.findall(run.stdout)}):
            report.append('tempest[%s]: FAILED %s' % (backend, test_id))
        skipped_tests, skipped_classes = skip_events(run.stdout)
        class_counts = {}
        if args.record_times and run.returncode == 0:
            write_times(backend, test_times(run.stdout))
        if skipped_classes:
            # Tempest reports a class skipped in its setUpClass once, and
            # none of its tests: count them from the run's own selection.
            listed = listed or list_tests(workspace, conf, regex, run_env,
                                          venv_bin)
            if listed is None:
                report.append('tempest[%s]: tempest run --list-tests '
                              'failed: each class skip counted as 1'
                              % backend)
                listed = []
            class_counts = class_test_counts(skipped_classes, listed)
            for class_id, count in sorted(class_counts.items()):
                report.append('tempest[%s]: class skipped: %s (%d tests)'
                              % (backend, class_id, count))
        ran, passed, skipped, failed = count_class_skips(
            summary(run.stdout), class_counts)
        skipped_here = skipped_tests | skipped_classes
        unlisted = unlisted_skips(backend, skipped_here, listed_skips())
        for test_id, why in unlisted:
            report.append('tempest[%s]: skipped, with no reason for this '
                          'run in %s (%s): %s' % (
                              backend, os.path.relpath(SKIPS, REPO), why,
                              test_id))
        report.append('tempest[%s]: ran %d, passed %d, skipped %d, failed '
                      '%d (%d s)' % (backend, ran, passed, skipped, failed,
                                     seconds))
        ok = run.returncode == 0 and not failed and ran and not unlisted
        if not ok:
            PROBLEMS.append('tempest[%s]: FAILED: tempest exited %d; ran %d, '
                            'failed %d, %d skip(s) with no reason listed%s'
                            % (backend, run.returncode, ran, failed,
                               len(unlisted), '' if ran else ': ' +
                               ' | '.join(run.stderr.strip().splitlines()
                                          [-5:])))
        return ran, passed, skipped, failed, seconds, ok, skipped_here
    finally:
        # A box that never came up was purged by bring_up.
        if env is not None and own_box and not args.keep:
            subprocess.run([STACK_SH, 'down', '--purge'], env=env,
                           capture_output=True, timeout=300)
        with _PRINT_LOCK:
            print('\n'.join(report), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='tools/run_tempest.py')
    parser.add_argument('--regex', default=None,
                        help='the tests of every run (default: each run\'s '
                             'own, DEFAULT_REGEX or REGEXES)')
    parser.add_argument('--concurrency', type=int, default=2)
    parser.add_argument('--backends', default=DEFAULT_BACKENDS,
                        help='one box and one run per backend '
                             '[tgt,rbd,libvirt]')
    parser.add_argument('--state-dir', help='a running --nova box (its '
                        'backends; --backends is then ignored)')
    parser.add_argument('--keep', action='store_true')
    parser.add_argument('--record-times', action='store_true',
                        help='write each passing run\'s test times to '
                             'tools/tempest-times/BACKEND.txt')
    args = parser.parse_args(argv)
    skips = listed_skips()  # a malformed list fails before any box
    started = time.monotonic()
    if args.state_dir:
        backends = [box_backend(args.state_dir)]
        runs = [run_one(args, backends[0], args.state_dir)]
    else:
        backends = args.backends.split(',')
        # Each backend's box and run side by side: tempest and the boxes
        # mostly wait (API round trips, waiters' polls, backups).  What
        # the boxes need is installed once, first: two pip runs in one
        # venv would race.
        install = subprocess.run([STACK_SH, 'install'], capture_output=True,
                                 text=True)
        if install.returncode:
            sys.stderr.write(install.stderr[-3000:])
            print('tempest: FAILED: tools/stack.sh install exited %d'
                  % install.returncode)
            return 1
        with futures.ThreadPoolExecutor(len(backends)) as pool:
            runs = list(pool.map(lambda backend: run_one(args, backend),
                                 backends))
    # The runs' counts add up; their seconds overlap: the wall time.
    total = [sum(r[i] for r in runs) for i in range(4)] + [
        time.monotonic() - started]
    unproduced = []
    if args.regex is None:
        # Only runs that ran: a box that did not come up failed already.
        unproduced = unproduced_skips(skips, {
            backend: run[6] for backend, run in zip(backends, runs)
            if run[0]})
        for test_id, backend in unproduced:
            print('tempest: listed in %s for the %s run, which did not '
                  'skip it: %s' % (os.path.relpath(SKIPS, REPO), backend,
                                   test_id))
    for problem in PROBLEMS:
        print(problem)
    print('tempest: ran %d, passed %d, skipped %d, failed %d (%d s)' %
          tuple(total), flush=True)
    return 0 if all(r[5] for r in runs) and not unproduced else 1


if __name__ == '__main__':
    sys.exit(main())
