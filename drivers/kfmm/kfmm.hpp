/// \file kfmm.hpp
/// The one header a host code includes: the solver, its options, the direct-sum reference, and the
/// layers below (tree, operators, core) for codes that use them on their own.
#pragma once

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/particle_types.hpp"
#include "kfmm/core/version.hpp"
