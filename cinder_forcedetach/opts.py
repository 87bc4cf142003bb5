"""Configuration options of cinder-forcedetach, per backend section."""

import itertools

from cinder.volume import configuration
from oslo_config import cfg

from cinder_forcedetach.arrays import sqlite as sqlite_array

force_detach_opts = [
    cfg.BoolOpt('forcedetach_disconnect_local_host',
                default=True,
                help='When a volume being force-detached is attached to '
                     'this volume host itself (image copy, backup, '
                     'migration), disconnect it with os-brick (force, '
                     'ignore errors) before the backend revokes access.'),
    cfg.IntOpt('forcedetach_device_scan_attempts',
               default=3, min=1,
               help='device_scan_attempts handed to the os-brick connector '
                    'that disconnects a local host connection.'),
]

image_opts = [
    cfg.ListOpt('forcedetach_image_formats',
                default=['raw', 'qcow2', 'vmdk', 'vdi', 'vhd', 'vhdx'],
                help='Image disk formats that copy_image_to_volume (and so '
                     'reimage and create from image) accepts, on top of '
                     'Cinder\'s own image checks, which every image passes: '
                     'the format inspector (content must match the declared '
                     'format), backing and data files, vmdk_allowed_types, '
                     'image_conversion_disable.'),
]

iscsi_opts = [
    cfg.StrOpt('forcedetach_volumes_dir',
               default='$state_path/forcedetach-volumes',
               help='Directory holding the sparse raw files that back '
                    'volumes of the tgt iSCSI driver.'),
    cfg.IntOpt('forcedetach_tgt_control_port',
               default=0, min=0, max=65535,
               help='Control port of the tgtd instance (tgtd -C N / '
                    'tgtadm -C N) that exports this backend.'),
    cfg.BoolOpt('forcedetach_chap_auth',
                default=True,
                help='Give every export its own CHAP account, created anew '
                     'whenever the export is created. Removing it is part '
                     'of what fences a force-detached initiator.'),
]

CONF = cfg.CONF
for _opts in (force_detach_opts, image_opts, iscsi_opts,
              sqlite_array.fc_opts):
    CONF.register_opts(_opts, group=configuration.SHARED_CONF_GROUP)


def list_opts():
    """The oslo.config.opts entry point: options per backend section."""
    # Imported here: the RBD driver module imports this one.
    from cinder_forcedetach.drivers import rbd as rbd_driver
    return [(configuration.SHARED_CONF_GROUP,
             list(itertools.chain(force_detach_opts, image_opts,
                                  iscsi_opts, sqlite_array.fc_opts,
                                  rbd_driver.rbd_opts)))]
