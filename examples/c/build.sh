# From a source checkout (the release tarball: see ffi-c/README.md for pkg-config and CMake).
cargo build --release -p ratekeeper-ffi     # target/release/libratekeeper.{so,a}
gcc examples/c/quickstart.c -Iinclude -Ltarget/release -lratekeeper \
    -Wl,-rpath,"$PWD/target/release" -o quickstart                                  # shared
gcc examples/c/quickstart.c -Iinclude target/release/libratekeeper.a -lpthread -ldl -lm -o quickstart-static   # static
