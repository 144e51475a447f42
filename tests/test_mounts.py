"""Mount table parsing and path-to-mount matching, without touching the paths."""
from __future__ import annotations

from slurm_hooks.host.mounts import MountTable, parse_mountinfo, read_mounts

SAMPLE = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
30 27 0:50 / /home rw,relatime shared:12 - nfs4 fs1:/export/home rw,vers=4.2
31 27 0:51 / /scratch rw,relatime - lustre 10.0.0.1@o2ib:/scratch rw
32 31 0:52 / /scratch/proj\\040one ro,relatime - fuse.sshfs me@host:/p rw
33 27 0:53 / /gpfswork rw - gpfs gpfswork rw
34 27 0:54 / /data rw - tmpfs tmpfs rw
35 34 0:55 / /data rw - nfs fs2:/data rw
36 27 0:56 / /sys/fs/fuse/connections rw - fusectl fusectl rw
37 27 0:57 / /var/lib/lxcfs rw - fuse.lxcfs lxcfs rw
38 27 0:58 / /cvmfs rw - fuse cvmfs2 rw,user_id=0,group_id=0,default_permissions,allow_other
39 27 0:59 / /tmp/alice/m rw,nosuid,nodev - fuse.fusefs fusefs-ok rw,user_id=1001,group_id=1001
40 39 0:60 / /tmp/alice/m/inner rw - fuse.other x rw,user_id=0,group_id=0
"""


def table():
    return MountTable(parse_mountinfo(SAMPLE))


def test_longest_prefix_wins_and_escapes_are_decoded():
    t = table()
    assert t.holding("/scratch/proj one/run/log").fstype == "fuse.sshfs"
    assert t.holding("/scratch/projother").mountpoint == "/scratch"
    assert t.holding("/homework").mountpoint == "/"
    assert t.holding("/home/u/x").source == "fs1:/export/home"
    assert t.holding("/scratch/proj one").options.startswith("ro,")


def test_fuse_mounts_made_by_users_are_theirs():
    t = table()
    assert t.at("/cvmfs").fuse_owner == 0 and not t.user_owned(t.at("/cvmfs"))
    assert t.at("/tmp/alice/m").fuse_owner == 1001 and t.at("/tmp/alice/m").user_fuse
    # Anything below a user's mount is theirs too: root cannot even enter there.
    assert t.user_owner(t.at("/tmp/alice/m/inner")) == 1001
    assert t.at("/home").fuse_owner is None and t.user_owner(t.at("/home")) is None


def test_stacked_mount_shadows_the_one_below():
    assert table().at("/data").fstype == "nfs"


def test_pure_string_normalisation():
    t = table()
    assert t.holding("/home/../scratch/x").mountpoint == "/scratch"
    assert t.holding("//home//u/").mountpoint == "/home"
    assert t.at("/home/").mountpoint == "/home"
    assert t.at("/nothere") is None


def test_network_classification():
    t = table()
    net = {m.mountpoint for m in t if m.is_network}
    assert net == {"/home", "/scratch", "/scratch/proj one", "/gpfswork", "/data", "/cvmfs",
                   "/tmp/alice/m", "/tmp/alice/m/inner"}


def test_garbage_lines_are_skipped():
    mounts = parse_mountinfo("garbage\n" + SAMPLE + "1 2\n")
    assert len(mounts) == 13


def test_reads_the_real_table():
    mounts = read_mounts()
    assert any(m.mountpoint == "/" for m in mounts)
    assert MountTable(mounts).holding("/proc/self").fstype == "proc"
