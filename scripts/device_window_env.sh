# Sourced on a GPU machine: the window's Debian packages (scripts/fetch_window_deps.sh carried them
# in .deps/window/debs) unpacked once into $TB_WINDOW_ROOT (/tmp/tb-window: outside the checkout,
# whose carried paths must stay under the call's 64 MiB), and the environment that makes the window
# built here load them: its libraries, Qt's plugins, the offscreen platform on a 1920x1080 screen
# (tests/screens), and fontconfig reading only the carried fonts.
#   . scripts/device_window_env.sh
tb_window=${TB_WINDOW_ROOT:-/tmp/tb-window}
tb_root=$tb_window/root
if [ ! -d "$tb_root/usr" ]; then
  mkdir -p "$tb_root"
  for d in "$(pwd)"/.deps/window/debs/*.deb; do dpkg -x "$d" "$tb_root" || return 1; done
fi
export LD_LIBRARY_PATH="$tb_root/usr/lib/x86_64-linux-gnu:$tb_root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export QT_PLUGIN_PATH="$tb_root/usr/lib/x86_64-linux-gnu/qt6/plugins"
export QT_QPA_PLATFORM="offscreen:configfile=$(pwd)/tests/screens/1920x1080.json"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/runtime-$(id -u)}
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
# fontconfig: the carried fonts and nothing of the host's (its configuration may name other files).
mkdir -p "$tb_window/fontcache"
cat > "$tb_window/fonts.conf" << EOF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir>$tb_root/usr/share/fonts</dir>
  <cachedir>$tb_window/fontcache</cachedir>
</fontconfig>
EOF
export FONTCONFIG_FILE="$tb_window/fonts.conf"
