/// \file kfmm.hpp
/// The one header a host code includes: the solver, its options and statistics, the accuracy control,
/// the direct-sum reference, the N-body helpers and initial conditions, and the layers below (tree,
/// operators, core) for codes that use them on their own.
#pragma once

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/particle_types.hpp"
#include "kfmm/core/version.hpp"
#include "kfmm/drivers/distributions.hpp"
#include "kfmm/drivers/nbody.hpp"
#include "kfmm/drivers/options.hpp"
#include "kfmm/drivers/solver.hpp"
#include "kfmm/drivers/statistics.hpp"
#include "kfmm/drivers/tolerance.hpp"
#include "kfmm/operators/direct_sum.hpp"
#include "kfmm/operators/l2l.hpp"
#include "kfmm/operators/l2p.hpp"
#include "kfmm/operators/m2l.hpp"
#include "kfmm/operators/m2m.hpp"
#include "kfmm/operators/p2m.hpp"
#include "kfmm/operators/p2p.hpp"
#include "kfmm/tree/dual_tree_walk.hpp"
#include "kfmm/tree/octree.hpp"
