// The dpbench command. Everything it does lives in bench/app/ so that tests can reach it.
#include "bench/app/cli.hpp"

int main(int argc, char** argv) { return dpbench::dpbench_main(argc, argv); }
