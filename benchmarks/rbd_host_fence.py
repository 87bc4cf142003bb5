#!/usr/bin/env python3
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

"""RBD host fence: N volumes of one host at once, against N force-detaches.

One process, one real single-node Ceph cluster (``tools/ceph-dev.sh``,
brought up in a private directory unless ``--ceph-dir`` names a running
one), our driver (``cinder_forcedetach.drivers.rbd.RBDDriver``) on it,
Cinder's volume and attachment rows in a SQLite database (real Cinder 29
schema), Cinder's coordinator (file backend) for the volume locks.

Host A is compute1: N volumes (``--volumes``, default 100) attached to it,
each written by its own live librbd client (a subprocess,
``tests.support.ceph.Writer``, one 4 KiB numbered block every
``--interval`` s) bound by an LD_PRELOAD shim to 127.0.0.11, the address
compute1's connector names: one client instance, so one client address,
per volume, as with one qemu per volume.  Host B, compute2 (127.0.0.12),
writes ``--other-volumes`` volumes of its own the whole run; they must stay
untouched.  A third host, compute3 (127.0.0.13), is the "elsewhere": one
librbd client that, once the fence has returned, opens and writes every
fenced image (8 threads).

Measured, each on a fresh set of N volumes and writers:

(a) batch: ``RBDDriver.fence_host(ctx, compute1, volumes)``: the
    force-detach flow per volume, paused before its fence, one fence of all
    (one connection, every client blocklisted once, all entries in flight
    together, one wait), then each flow's database reset;
(b) sequential: ``RBDDriver.force_detach(ctx, volume, compute1)`` for each
    volume in turn: the same flow with its own fence per volume;
(c) batch, IP-wide (``ip_wide=True``; skipped with ``--no-ip-wide``): one
    ``IP:0/0`` blocklist entry for compute1 instead of one per client.
    Run last: it shuts every later client of 127.0.0.11 out too.

For each: the fence call (until every volume is ``available`` in the
database), then until compute3's new client has written every image; the
total, per volume, and the ratio sequential / batch.  Then, per writer:
its writes acknowledged after its volume became ``available`` (must be 0),
and the blocks it tried after its first failure read back from the
cluster (landed: must be 0; the write in flight at the fence may or may
not be there and is not counted); every writer must fail with errno 108.
Host B: its writers wrote on through all of it, none failed, its last
blocks are in the images, its addresses are not blocklisted, its volumes
are still in-use.  Exit status 0 only when all of that holds.

The test cluster commits OSD map changes every 0.1 s (``paxos propose
interval``); Ceph's default is 1 s, which a per-volume fence (one blocklist
commit each) pays N times and the batch about once.

Usage: .venv/bin/python benchmarks/rbd_host_fence.py [--volumes 100]
           [--other-volumes 3] [--interval 0.25] [--no-ip-wide]
           [--ceph-dir DIR]
"""

import argparse
from concurrent import futures
import cProfile
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from cinder import context as cinder_context  # noqa: E402
from cinder import coordination  # noqa: E402
from cinder.db import migration  # noqa: E402
from cinder import objects  # noqa: E402
from oslo_concurrency import lockutils  # noqa: E402
from oslo_config import cfg  # noqa: E402
import rbd  # noqa: E402

from cinder_forcedetach.ceph import environ as ceph_environ  # noqa: E402
from cinder_forcedetach.drivers import rbd as rbd_driver  # noqa: E402
from tests.support import ceph  # noqa: E402

CONF = cfg.CONF
BLOCK = ceph.BLOCK
WRITER_BASE = 16            # the writers' first block (the new client: 0)
GOAL_SECONDS = 3.0          # for 100 volumes
# Cinder's database in SQLite on tmpfs: a commit costs what a MySQL commit
# over a LAN does (~1 ms), not an fsync of this VM's disk under load.
DB_DIR = '/dev/shm' if os.path.isdir('/dev/shm') else tempfile.gettempdir()


def connector(host):
    return {'host': host, 'ip': ceph.HOST_IPS[host], 'platform': 'x86_64',
            'os_type': 'linux', 'multipath': False,
            'do_local_attach': False}


HOST_A, HOST_B = connector('compute1'), connector('compute2')

# compute3's client: connects, then for each JSON list of image names on
# stdin opens, writes block 0 of, flushes and closes each (8 threads) and
# prints {"seconds", "errors"}.
NEW_HOST = r'''
import json, sys, threading, time
import rados, rbd
p = json.loads(sys.argv[1])
client = rados.Rados(rados_id=p['user'], conf={
    'mon_host': p['mon_host'], 'keyring': p['keyring'],
    'client_mount_timeout': '30'})
client.connect()
ioctx = client.open_ioctx(p['pool'])
print('READY', client.get_addrs(), flush=True)
for line in sys.stdin:
    names = json.loads(line)
    errors = []
    t0 = time.monotonic()
    def work(chunk):
        for name in chunk:
            try:
                with rbd.Image(ioctx, name) as image:
                    image.write(b'N' * 4096, 0)
                    image.flush()
            except Exception as err:
                errors.append('%s: %r' % (name, err))
    threads = [threading.Thread(target=work, args=(names[i::8],))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({'seconds': time.monotonic() - t0, 'errors': errors}),
          flush=True)
'''


class NewHost(object):
    """compute3's librbd client, connected before the fence starts."""

    def __init__(self, cluster, info):
        params = {'mon_host': ','.join('%s:%s' % hp for hp in zip(
            info['hosts'], info['ports'])), 'keyring': cluster.keyring,
            'user': info['auth_username'], 'pool': cluster.pool}
        env = ceph_environ.clean_environ()
        env.update(LD_PRELOAD=cluster.shim,
                   CFD_BIND_IP=ceph.HOST_IPS['compute3'])
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, '-c', NEW_HOST, json.dumps(params)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, text=True, env=env)
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != 'READY':
            raise RuntimeError('compute3 client did not start: %s' % ready)
        self.addr = ready[1]

    def write_all(self, names):
        """``(seconds, errors)`` of writing every image in *names*."""
        self.proc.stdin.write(json.dumps(names) + '\n')
        self.proc.stdin.flush()
        result = json.loads(self.proc.stdout.readline())
        return result['seconds'], result['errors']

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.stderr.close()


# -- volumes and writers ----------------------------------------------------


def make_volumes(ctx, driver, template, host, n):
    """*n* volumes attached to *host*: images, rows, connection_info."""
    result = []
    vtype = objects.VolumeType.get_by_name_or_id(ctx, '__DEFAULT__').id
    for _ in range(n):
        vol = objects.Volume(
            ctx, size=1, host='bench@rbd#rbd', status='in-use',
            attach_status='attached', display_name='host-fence',
            volume_type_id=vtype)
        vol.create()
        driver.create_volume(vol)
        info = json.loads(json.dumps(template))
        info['data']['name'] = '%s/%s' % (
            info['data']['name'].split('/', 1)[0], vol.name)
        att = objects.VolumeAttachment(
            ctx, volume_id=vol.id, attach_status='attached',
            attached_host=host['host'], connector=host, attach_mode='rw')
        att.create()
        att.connection_info = info
        att.save()
        result.append((vol, info['data']))
    return result


def start_writers(cluster, volumes, host, tag, interval):
    def start(item):
        index, (_vol, info) = item
        return ceph.Writer(cluster, info, host, tag='%s%d' % (tag, index),
                           base=WRITER_BASE, count=200000,
                           interval=interval, mount_timeout=60)
    with futures.ThreadPoolExecutor(16) as pool:
        writers = list(pool.map(start, enumerate(volumes)))
    for writer in writers:
        writer.wait_oks(3, timeout=120)
    return writers


def read_blocks(ioctx, name, first, count):
    """Blocks *first*.. of a writer's range of image *name*."""
    with rbd.Image(ioctx, name, read_only=True) as image:
        data = image.read((WRITER_BASE + first) * BLOCK, count * BLOCK)
    return [data[i * BLOCK:(i + 1) * BLOCK] for i in range(count)]


def judge_writer(ioctx, writer, name, available_at):
    """What one fenced writer did: ``{late, landed, error, cut_at}``."""
    try:
        writer.wait_fenced(15)
        writer.finish(15)
    except AssertionError:
        writer.stop()
        return {'late': len([1 for _s, t in writer.oks()
                             if t > available_at]),
                'landed': 0, 'error': 'never failed', 'cut_at': None}
    late = [s for s, t in writer.oks() if t > available_at]
    errs = writer.errs()
    first_err = errs[0][0]
    tried = [s for s, _t in writer.oks()] + [e[0] for e in errs]
    after = range(first_err + 1, max(tried) + 1)
    blocks = read_blocks(ioctx, name, first_err + 1, len(after)) \
        if len(after) else []
    landed = sum(1 for seq, got in zip(after, blocks)
                 if got == ceph.block_for(writer.tag, seq))
    return {'late': len(late), 'landed': landed,
            'error': '%s (errno %s)' % (errs[0][2], errs[0][1]),
            'cut_at': errs[0][3]}


# -- the two ways -------------------------------------------------------------


def run_way(way, cluster, ctx, driver, new_host, volumes, writers,
            profile=None):
    """Fence host A off *volumes*; a result dict.

    *profile*: a file for cProfile statistics of the batch way's call.
    """
    before = cluster.blocklist()
    t0, wall0, load = time.monotonic(), time.time(), os.getloadavg()[0]
    cpu0 = time.process_time()
    available = {}
    failed = {}
    steps = None
    if way == 'sequential':
        for vol, _info in volumes:
            try:
                driver.force_detach(ctx, vol, connector=HOST_A)
            except Exception as err:
                failed[vol.id] = err
            available[vol.id] = time.time()
    else:
        profiler = cProfile.Profile() if profile and way == 'batch' else None
        if profiler:
            profiler.enable()
        report = driver.fence_host(ctx, HOST_A, [v for v, _i in volumes],
                                   ip_wide=(way == 'ip-wide'))
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        failed.update(report.failed)
        steps = report.seconds
        now = time.time()
        available = {vol.id: now for vol, _i in volumes}
    t_fence = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    new_seconds, new_errors = new_host.write_all(
        [vol.name for vol, _i in volumes])
    t_total = time.monotonic() - t0
    not_reset = []
    for vol, _info in volumes:
        vol.refresh()
        if (vol.status, vol.attach_status) != ('available', 'detached'):
            not_reset.append(vol.id)
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.pool) as ioctx:
            judged = [judge_writer(ioctx, w, vol.name, available[vol.id])
                      for (vol, _i), w in zip(volumes, writers)]
    finally:
        client.shutdown()
    added = cluster.blocklist() - before
    cuts = [j['cut_at'] for j in judged if j['cut_at']]
    return {
        'all_cut': max(cuts) - wall0 if cuts else float('nan'),
        'cpu': cpu,
        'steps': steps,
        'way': way, 'n': len(volumes), 'fence': t_fence,
        'new_client': new_seconds, 'total': t_total, 'load': load,
        'failed': failed, 'new_errors': new_errors, 'not_reset': not_reset,
        'late': sum(j['late'] for j in judged),
        'landed': sum(j['landed'] for j in judged),
        'errors': sorted({j['error'] for j in judged}),
        'entries': len(added),
    }


def check_other_host(cluster, other, writers, since):
    """Host B after everything: a list of what is wrong (empty: fine)."""
    wrong = []
    blocklist = cluster.blocklist()
    client = cluster.connect()
    ioctx = client.open_ioctx(cluster.pool)
    for (vol, _info), writer in zip(other, writers):
        try:
            writer.wait_oks(3, timeout=20)
        except AssertionError as err:
            wrong.append('%s stopped writing: %s' % (writer.tag, err))
            continue
        if writer.errs():
            wrong.append('%s saw %s' % (writer.tag, writer.errs()[0]))
        seq = max(s for s, _t in writer.oks())
        if read_blocks(ioctx, vol.name, seq, 1)[0] != ceph.block_for(
                writer.tag, seq):
            wrong.append('%s: block %d not in the image' % (writer.tag, seq))
        if writer.addr in blocklist:
            wrong.append('%s is blocklisted' % writer.addr)
        vol.refresh()
        if vol.status != 'in-use':
            wrong.append('%s is %s' % (vol.id, vol.status))
    ioctx.close()
    client.shutdown()
    writes = sum(len([1 for _s, t in w.oks() if t > since]) for w in writers)
    return wrong, writes


# -- output ------------------------------------------------------------------


def print_results(results, n, other_wrong, other_writes, n_other):
    print('\nHost fence: %d volumes of compute1 (127.0.0.11), each with a '
          'live librbd writer of its own (one client address per volume);'
          ' compute3 (127.0.0.13) then writes every image.  "last cut": '
          'when the last writer saw its first failure (its next write '
          'after the cut, up to --interval later); "fence+DB": until '
          'every volume is available in the database (CPU: this '
          'process\'s, librados threads included):' % n)
    fmt = '  %-11s %9s %9s %8s %10s %9s %10s %7s %4s %6s %5s  %s'
    print(fmt % ('way', 'last cut', 'fence+DB', '(CPU)', 'new client',
                 'total', 'per volume', 'entries', 'late', 'landed', 'load',
                 'writers saw'))
    for r in results:
        print(fmt % (r['way'], '%.2f s' % r['all_cut'],
                     '%.2f s' % r['fence'], '%.2f s' % r['cpu'],
                     '%.2f s' % r['new_client'],
                     '%.2f s' % r['total'],
                     '%.4f s' % (r['total'] / r['n']), r['entries'],
                     r['late'], r['landed'], '%.1f' % r['load'],
                     ', '.join(r['errors'])))
    for r in results:
        if r['steps']:
            print('  %s: flows up to the fence %.2f s, the fence (Ceph) '
                  '%.2f s, flows after it %.2f s'
                  % ((r['way'],) + tuple(r['steps'])))
    by_way = {r['way']: r for r in results}
    batch, seq = by_way['batch'], by_way['sequential']
    print('  sequential / batch: %.1fx total, %.1fx fence+DB' % (
        seq['total'] / batch['total'], seq['fence'] / batch['fence']))
    problems = []
    for r in results:
        for vid, err in sorted(r['failed'].items()):
            problems.append('%s: volume %s failed: %s' % (r['way'], vid,
                                                          err))
        if r['not_reset']:
            problems.append('%s: %d volume(s) not available' % (
                r['way'], len(r['not_reset'])))
        if r['new_errors']:
            problems.append('%s: the new client failed on %s' % (
                r['way'], r['new_errors'][:3]))
        if r['late'] or r['landed']:
            problems.append('%s: writes after the fence: %d acknowledged, '
                            '%d landed' % (r['way'], r['late'], r['landed']))
        if r['errors'] != ['ConnectionShutdown (errno 108)']:
            problems.append('%s: writers saw %s' % (r['way'], r['errors']))
    print('  compute2: %d writer(s) on %d volume(s) of its own wrote %d '
          'blocks meanwhile; %s' % (
              n_other, n_other, other_writes,
              '; '.join(other_wrong) if other_wrong else
              'none failed, their last blocks are in the images, not '
              'blocklisted, volumes still in-use'))
    problems += ['compute2: ' + w for w in other_wrong]
    if n >= 100:
        print('  goal: batch < %.0f s for %d volumes (fence, DB and the new '
              'client): %s (%.2f s)' % (
                  GOAL_SECONDS, n, 'met' if batch['total'] < GOAL_SECONDS
                  else 'NOT MET', batch['total']))
    print('  nothing lands after the fence: %s' % (
        'met' if not any(r['late'] or r['landed'] for r in results)
        else 'NOT MET'))
    for problem in problems:
        print('  PROBLEM: %s' % problem)
    return not problems


# -- setup --------------------------------------------------------------------


def run(args, cluster, workdir):
    ctx = cinder_context.get_admin_context()
    driver = ceph.make_rbd_driver(rbd_driver.RBDDriver, 'ours', cluster)
    # upstream's connection_info (monitors, user, pool) once, as a
    # template: its initialize_connection runs `ceph mon dump` every call
    probe = objects.Volume(ctx, size=1, host='bench@rbd#rbd',
                           status='available', attach_status='detached')
    probe.create()
    template = driver.initialize_connection_unlocked(probe, HOST_A)
    new_host = NewHost(cluster, template['data'])
    all_writers = []
    try:
        other = make_volumes(ctx, driver, template, HOST_B,
                             args.other_volumes)
        other_writers = start_writers(cluster, other, 'compute2', 'B',
                                      args.interval)
        all_writers += other_writers
        since = time.time()
        ways = ['batch', 'sequential'] + ([] if args.no_ip_wide
                                          else ['ip-wide'])
        results = []
        for way in ways:
            t0 = time.monotonic()
            volumes = make_volumes(ctx, driver, template, HOST_A,
                                   args.volumes)
            writers = start_writers(cluster, volumes, 'compute1', 'A',
                                    args.interval)
            all_writers += writers
            print('%s: %d volumes and writers ready in %.1f s (load %.1f)'
                  % (way, args.volumes, time.monotonic() - t0,
                     os.getloadavg()[0]), flush=True)
            results.append(run_way(way, cluster, ctx, driver, new_host,
                                   volumes, writers, args.profile))
        other_wrong, other_writes = check_other_host(
            cluster, other, other_writers, since)
        return print_results(results, args.volumes, other_wrong,
                             other_writes, len(other))
    finally:
        for writer in all_writers:
            writer.stop()
        new_host.stop()
        if not cluster.owned:
            # someone else's cluster: lift what we fenced (ours is purged)
            fences = driver._fencing()
            for entry in sorted({f.get('entry') or f['addr']
                                 for f in fences.list()}):
                fences.lift(addr=entry)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--volumes', type=int, default=100,
                        help='volumes of compute1 per way (default 100)')
    parser.add_argument('--other-volumes', type=int, default=3,
                        help='volumes compute2 writes meanwhile (default 3)')
    parser.add_argument('--interval', type=float, default=0.25,
                        help='seconds between two writes of a writer '
                             '(default 0.25: 100 writers make 400 writes/s '
                             'on the one OSD, on the same 2 cores as the '
                             'rest)')
    parser.add_argument('--db-dir', default=DB_DIR,
                        help='directory of the SQLite database (default '
                             '%(default)s)')
    parser.add_argument('--no-ip-wide', action='store_true',
                        help='skip the IP-wide batch')
    parser.add_argument('--paxos-interval', type=float, default=None,
                        help='set the monitor\'s paxos_propose_interval for '
                             'the run (1 = Ceph\'s default; the test '
                             'cluster has 0.1); not with --ceph-dir')
    parser.add_argument('--ceph-dir', default=None,
                        help='use the running tools/ceph-dev.sh cluster of '
                             'this directory')
    parser.add_argument('--profile', default=None, metavar='FILE',
                        help='write cProfile statistics of the batch '
                             'way\'s fence_host call to FILE')
    args = parser.parse_args()
    if args.paxos_interval is not None and args.ceph_dir:
        parser.error('--paxos-interval changes the monitor: only on the '
                     'cluster this script brings up')

    objects.register_all()
    workdir = tempfile.mkdtemp(prefix='fd-host-fence-bench-')
    CONF([], project='cinder', default_config_files=[])
    lockutils.set_defaults(workdir)
    CONF.set_override('backend_url', 'file://' + workdir, 'coordination')
    coordination.COORDINATOR.start()
    db_file = os.path.join(args.db_dir, 'fd-host-fence-%d.sqlite' %
                           os.getpid())
    CONF.set_override('connection', 'sqlite:///' + db_file, 'database')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')     # alembic on SQLite constraints
        migration.db_sync()
    cluster = ceph.make_cluster(
        args.ceph_dir, own_dir=os.path.join(workdir, 'ceph'),
        osd_size='16G', mount_timeout=60)
    ok = False
    try:
        cluster.up()
        if not cluster.build_shim():
            sys.exit('needs gcc: each host\'s clients must have their own '
                     'address (the LD_PRELOAD bind shim)')
        if args.paxos_interval is not None:
            cluster.admin('tell', 'mon.*', 'config', 'set',
                          'paxos_propose_interval', str(args.paxos_interval))
        res = cluster.admin('tell', 'mon.*', 'config', 'get',
                            'paxos_propose_interval', '--format', 'json')
        try:
            interval = ', '.join(sorted(
                str(v.get('paxos_propose_interval', v)) if isinstance(
                    v, dict) else str(v)
                for v in json.loads(res.stdout or '{}').values()))
        except (ValueError, AttributeError):
            interval = '?'
        print('ceph-dev.sh up: %.1f s; paxos_propose_interval %s; load '
              'average %.1f' % (cluster.up_seconds or 0, interval,
                                os.getloadavg()[0]), flush=True)
        ok = run(args, cluster, workdir)
        print('\nload average at the end: %.1f' % os.getloadavg()[0])
    finally:
        coordination.COORDINATOR.stop()
        cluster.release()
        shutil.rmtree(workdir, ignore_errors=True)
        if os.path.exists(db_file):
            os.unlink(db_file)
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
