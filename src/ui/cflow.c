#include "config.h"
#include <stdio.h>
#include "engine/engine.h"
int main(void) { printf("cflow %s\n", PACKAGE_VERSION); return 0; }
