// Everything a user of the HAL needs: #include "tessera/hal/hal.h".
#pragma once

#include "tessera/hal/backend.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/memory.h"
#include "tessera/hal/module.h"
#include "tessera/hal/platform.h"
#include "tessera/hal/registry.h"
#include "tessera/hal/stream.h"
