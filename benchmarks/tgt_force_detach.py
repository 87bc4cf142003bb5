#!/usr/bin/env python3
"""Force-detach teardown of N live tgt exports: ours against upstream's.

For N = 1, 10, 100 (``--sizes``) it exports N volumes on one real tgtd
(same kind of target for both sides: one target per volume, LUN 1 on a
sparse file, a CHAP account and an initiator ACL), logs a live qemu-io
initiator into each, then times the backend teardown of all N:

* ours: the driver hooks force-detach runs
  (``TgtISCSIDriver.revoke_host_access(volume, None)`` then
  ``remove_export``);
* upstream: Cinder's tgt helper
  (``cinder.volume.targets.tgt.TgtAdm.remove_iscsi_target``, i.e.
  ``tgt-admin --force --delete`` plus its retry), privsep in-process.

It prints wall time per N, the ratio ours/upstream, and what each side
left behind (targets and sessions still on the daemon).  Upstream's helper
talks to tgtd's default control port, so the benchmark starts a tgtd on
control port 0 and refuses to run if one is already there.

Usage: .venv/bin/python benchmarks/tgt_force_detach.py [--sizes 1,10,100]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from cinder import exception as cinder_exception  # noqa: E402
import cinder.privsep  # noqa: E402
from cinder.volume import configuration  # noqa: E402
from cinder.volume import driver as cinder_driver  # noqa: E402
from cinder.volume.targets import tgt as upstream_tgt  # noqa: E402
from oslo_concurrency import lockutils  # noqa: E402
from oslo_config import cfg  # noqa: E402

from cinder_forcedetach.drivers import iscsi  # noqa: E402
from tests.functional import fixtures as fd_fixtures  # noqa: E402

PREFIX = 'iqn.2010-10.org.openstack:'
INITIATOR = 'iqn.2026-11.org.cinder-forcedetach.bench:compute1'


class Volume(types.SimpleNamespace):
    """The attributes of a Cinder volume the teardown reads."""


def start_tgtd(workdir):
    if os.path.exists(os.path.join(fd_fixtures.TGTD_SOCKET_DIR,
                                   'socket.0')):
        probe = subprocess.run(['tgtadm', '--op', 'show', '--mode', 'sys'],
                               capture_output=True)
        if probe.returncode == 0:
            sys.exit('a tgtd already runs on control port 0; stop it first')
    daemon = fd_fixtures.Tgtd(workdir)
    daemon.control_port = 0
    daemon.start()
    return daemon


def export_all(target, workdir, tag, count, port):
    """N exported volumes, each held by a live qemu-io initiator."""
    volumes, sessions = [], []
    for i in range(count):
        name = 'volume-bench-%s-%03d' % (tag, i)
        path = os.path.join(workdir, name)
        with open(path, 'wb') as f:
            f.truncate(64 << 20)
        user, password = 'u%s%03d' % (tag, i), 'benchpass%s%03d' % (tag, i)
        target.export(PREFIX + name, path, user, password)
        target.grant(PREFIX + name, INITIATOR)
        volumes.append(Volume(name=name, id=name, path=path,
                              provider_auth='CHAP %s %s' % (user, password)))
    for vol in volumes:
        user, password = vol.provider_auth.split()[1:]
        sessions.append(fd_fixtures.QemuIoInitiator(
            '127.0.0.1:%d' % port, PREFIX + vol.name, INITIATOR, user,
            password))
    for session in sessions:
        if session.write(0x5a) is not True:
            raise RuntimeError('an initiator could not write')
    return volumes, sessions


def leftovers(target, volumes):
    names = {PREFIX + v.name for v in volumes}
    states = [s for n, s in target.list_targets().items() if n in names]
    return len(states), sum(len(s.sessions) for s in states)


def ours(driver, volumes):
    for vol in volumes:
        driver.revoke_host_access(vol, None)
        driver.remove_export(None, vol)


def upstream(helper, volumes, volumes_dir):
    failures = 0
    for vol in volumes:
        # Upstream keeps a per-volume config file and checks it first.
        open(os.path.join(volumes_dir, vol.name), 'w').close()
        try:
            helper.remove_iscsi_target(0, 1, vol.id, vol.name)
        except cinder_exception.ISCSITargetRemoveFailed:
            failures += 1
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', default='1,10,100')
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(',')]

    workdir = tempfile.mkdtemp(prefix='fd-bench-')
    cfg.CONF([], project='cinder', default_config_files=[])
    lockutils.set_defaults(workdir)
    cinder.privsep.sys_admin_pctxt.set_client_mode(False)
    daemon = start_tgtd(workdir)
    driver = iscsi.TgtISCSIDriver(configuration=configuration.Configuration(
        cinder_driver.volume_opts, config_group='benchmark'))
    target = driver.target
    upstream_dir = os.path.join(workdir, 'upstream-volumes')
    os.makedirs(upstream_dir)
    helper = upstream_tgt.TgtAdm(
        root_helper='', configuration=types.SimpleNamespace(
            target_prefix=PREFIX, volumes_dir=upstream_dir,
            target_protocol='iscsi', iscsi_target_flags='',
            safe_get=lambda key: None, get=lambda key, default=None: default,
            target_helper='tgtadm'))
    helper.volumes_dir = upstream_dir
    helper.iscsi_target_prefix = PREFIX

    rows = []
    try:
        for n in sizes:
            result = {}
            for side in ('ours', 'upstream'):
                volumes, sessions = export_all(target, workdir, side[0], n,
                                               daemon.port)
                start = time.monotonic()
                failed = (ours(driver, volumes) if side == 'ours' else
                          upstream(helper, volumes, upstream_dir))
                elapsed = time.monotonic() - start
                left = leftovers(target, volumes)
                result[side] = (elapsed, left, failed or 0)
                for session in sessions:
                    session.close()
                for vol in volumes:       # clean what upstream left
                    target.unexport(PREFIX + vol.name)
                    os.unlink(vol.path)
            rows.append((n, result))
            o, u = result['ours'], result['upstream']
            print('N=%-4d ours %7.3f s (targets left %d, sessions left %d)  '
                  'upstream %7.3f s (targets left %d, sessions left %d, '
                  'errors %d)  ratio ours/upstream %.3f' % (
                      n, o[0], o[1][0], o[1][1], u[0], u[1][0], u[1][1],
                      u[2], o[0] / u[0]), flush=True)
    finally:
        daemon.stop()
    return rows


if __name__ == '__main__':
    main()
