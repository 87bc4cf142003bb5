#!/bin/bash
# devstack plugin for cinder-forcedetach.
#
# In local.conf:
#   enable_plugin cinder-forcedetach https://opendev.org/openstack/cinder-forcedetach
#
# override-defaults adds the backend forcedetach_iscsi:forcedetach to
# CINDER_ENABLED_BACKENDS (unless a forcedetach_iscsi backend is listed
# already) and defaults CINDER_TARGET_HELPER to tgtadm.  Nothing happens
# on a node without c-vol.  See devstack/README.rst for the phases.
#
# Where devstack (stack.sh) calls what is defined here:
#   run_phase stack pre-install      plugin.sh sourced: functions defined
#   configure_cinder (lib/cinder)    configure_cinder_backend_forcedetach_iscsi
#   run_phase stack install          install_cinder_forcedetach
#   init_cinder (lib/cinder)         init_cinder_backend_forcedetach_iscsi
#   run_phase stack post-config      start_cinder_forcedetach_tgt
#   start_cinder (lib/cinder)        c-vol starts with our backend
# unstack.sh: run_phase unstack      stop_cinder_forcedetach
# clean.sh:   run_phase clean        cleanup_cinder_forcedetach
# With horizon: install_cinder_forcedetach_dashboard (stack install) and
# cleanup_cinder_forcedetach_dashboard (clean).

CINDER_FORCEDETACH_DIR=${CINDER_FORCEDETACH_DIR:-$DEST/cinder-forcedetach}
CINDER_FORCEDETACH_VOLUMES_DIR=${CINDER_FORCEDETACH_VOLUMES_DIR:-$DATA_DIR/cinder-forcedetach}
CINDER_FORCEDETACH_TGT_CONTROL_PORT=${CINDER_FORCEDETACH_TGT_CONTROL_PORT:-0}

# The distribution's tgtd service.
function _cinder_forcedetach_tgt_service {
    if is_ubuntu; then
        echo tgt
    else
        echo tgtd
    fi
}

function install_cinder_forcedetach {
    if is_ubuntu; then
        install_package tgt qemu-utils qemu-block-extra
    else
        install_package scsi-target-utils qemu-img
    fi
    # No rootwrap filters: tgtadm runs through Cinder's privsep context
    # (cinder.privsep.sys_admin_pctxt), qemu-img and cp unprivileged.
    setup_develop "$CINDER_FORCEDETACH_DIR"
}

# Called by lib/cinder's configure_cinder (found with "type") for each
# backend forcedetach_iscsi:NAME of CINDER_ENABLED_BACKENDS.
function configure_cinder_backend_forcedetach_iscsi {
    local be_name=$1
    iniset "$CINDER_CONF" "$be_name" volume_backend_name "$be_name"
    iniset "$CINDER_CONF" "$be_name" volume_driver \
        cinder_forcedetach.drivers.iscsi.TgtISCSIDriver
    iniset "$CINDER_CONF" "$be_name" forcedetach_volumes_dir \
        "$CINDER_FORCEDETACH_VOLUMES_DIR/$be_name"
    iniset "$CINDER_CONF" "$be_name" forcedetach_tgt_control_port \
        "$CINDER_FORCEDETACH_TGT_CONTROL_PORT"
    iniset "$CINDER_CONF" "$be_name" target_ip_address "$HOST_IP"
}

# Called by lib/cinder's init_cinder for each forcedetach_iscsi:NAME.
function init_cinder_backend_forcedetach_iscsi {
    local be_name=$1
    sudo mkdir -p "$CINDER_FORCEDETACH_VOLUMES_DIR/$be_name"
    sudo chown "$STACK_USER" "$CINDER_FORCEDETACH_VOLUMES_DIR/$be_name"
}

# c-vol needs a running tgtd.  With CINDER_TARGET_HELPER=tgtadm (our
# default) lib/cinder's start_cinder restarts tgt itself.
function start_cinder_forcedetach_tgt {
    if [[ "$CINDER_TARGET_HELPER" != "tgtadm" \
            && "$CINDER_FORCEDETACH_TGT_CONTROL_PORT" == "0" ]]; then
        restart_service "$(_cinder_forcedetach_tgt_service)"
    fi
}

# Targets of tgtd whose backing store is one of our volume files.
function _cinder_forcedetach_target_ids {
    sudo tgtadm -C "$CINDER_FORCEDETACH_TGT_CONTROL_PORT" --lld iscsi \
        --op show --mode target 2>/dev/null \
        | awk -v dir="$CINDER_FORCEDETACH_VOLUMES_DIR/" '
            /^Target [0-9]+:/ { tid = $2; sub(":", "", tid) }
            /Backing store path:/ && index($4, dir) == 1 { print tid }' \
        | sort -un
}

# unstack: remove the exports we created, stop the tgtd we started.  The
# volume files stay (clean removes them).
function stop_cinder_forcedetach {
    local tid
    for tid in $(_cinder_forcedetach_target_ids); do
        sudo tgtadm -C "$CINDER_FORCEDETACH_TGT_CONTROL_PORT" --lld iscsi \
            --op delete --mode target --tid "$tid" --force || true
    done
    # With tgtadm, lib/cinder's cleanup_cinder stops tgt after us.
    if [[ "$CINDER_TARGET_HELPER" != "tgtadm" \
            && "$CINDER_FORCEDETACH_TGT_CONTROL_PORT" == "0" ]]; then
        stop_service "$(_cinder_forcedetach_tgt_service)" || true
    fi
}

# clean: remove the volume files.
function cleanup_cinder_forcedetach {
    sudo rm -rf "$CINDER_FORCEDETACH_VOLUMES_DIR"
}

# Horizon's node: our panel, enabled as every Horizon plugin is (its
# enabled file in openstack_dashboard/local/enabled/), before init_horizon
# collects and compresses the static files.
CINDER_FORCEDETACH_PANEL=_2225_admin_volume_attachments_panel.py

function install_cinder_forcedetach_dashboard {
    setup_develop "$CINDER_FORCEDETACH_DIR"
    cp "$CINDER_FORCEDETACH_DIR/cinder_forcedetach/dashboard/enabled/$CINDER_FORCEDETACH_PANEL" \
        "$HORIZON_DIR/openstack_dashboard/local/enabled/"
}

function cleanup_cinder_forcedetach_dashboard {
    rm -f "$HORIZON_DIR/openstack_dashboard/local/enabled/$CINDER_FORCEDETACH_PANEL"
}

if is_service_enabled horizon; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Enabling the cinder-forcedetach Horizon panel"
        install_cinder_forcedetach_dashboard
    elif [[ "$1" == "clean" ]]; then
        cleanup_cinder_forcedetach_dashboard
    fi
fi

if is_service_enabled c-vol; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing cinder-forcedetach"
        install_cinder_forcedetach
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Starting tgtd for cinder-forcedetach"
        start_cinder_forcedetach_tgt
    fi

    if [[ "$1" == "unstack" ]]; then
        stop_cinder_forcedetach
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_cinder_forcedetach
    fi
fi
