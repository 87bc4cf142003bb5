#!/bin/bash
# devstack plugin for cinder-forcedetach.
#
# In local.conf:
#   enable_plugin cinder-forcedetach https://opendev.org/openstack/cinder-forcedetach
#   CINDER_ENABLED_BACKENDS=forcedetach_iscsi:fdiscsi
#
# It installs the package, tgt and qemu-img, and configures each
# "forcedetach_iscsi" backend to use cinder_forcedetach's tgt iSCSI driver.

CINDER_FORCEDETACH_DIR=${CINDER_FORCEDETACH_DIR:-$DEST/cinder-forcedetach}
CINDER_FORCEDETACH_VOLUMES_DIR=${CINDER_FORCEDETACH_VOLUMES_DIR:-$DATA_DIR/cinder-forcedetach}
CINDER_FORCEDETACH_TGT_CONTROL_PORT=${CINDER_FORCEDETACH_TGT_CONTROL_PORT:-0}

function install_cinder_forcedetach {
    install_package tgt qemu-utils
    setup_develop $CINDER_FORCEDETACH_DIR
    sudo install -o root -g root -m 644 \
        $CINDER_FORCEDETACH_DIR/etc/cinder/rootwrap.d/forcedetach.filters \
        $CINDER_CONF_DIR/rootwrap.d/forcedetach.filters
}

# Called by lib/cinder for each backend named forcedetach_iscsi:NAME.
function configure_cinder_backend_forcedetach_iscsi {
    local be_name=$1
    iniset $CINDER_CONF $be_name volume_backend_name $be_name
    iniset $CINDER_CONF $be_name volume_driver \
        cinder_forcedetach.drivers.iscsi.TgtISCSIDriver
    iniset $CINDER_CONF $be_name forcedetach_volumes_dir \
        $CINDER_FORCEDETACH_VOLUMES_DIR/$be_name
    iniset $CINDER_CONF $be_name forcedetach_tgt_control_port \
        $CINDER_FORCEDETACH_TGT_CONTROL_PORT
    iniset $CINDER_CONF $be_name target_ip_address $HOST_IP
}

function init_cinder_backend_forcedetach_iscsi {
    sudo mkdir -p $CINDER_FORCEDETACH_VOLUMES_DIR/$1
    sudo chown $STACK_USER $CINDER_FORCEDETACH_VOLUMES_DIR/$1
}

if [[ "$1" == "stack" && "$2" == "install" ]]; then
    echo_summary "Installing cinder-forcedetach"
    install_cinder_forcedetach
elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
    # lib/cinder sources the backend functions defined above.
    :
fi
