package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/cli/ctrd"
	"github.com/cryo-gpu/cryo/internal/cli/podman"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/report"
)

// precheckImage refuses, before anything is unpacked, a restore that the
// image's manifest alone shows to be impossible here: unpacking and
// hashing an image of 80 GB takes minutes, and a typo should not cost
// them. The annotations it reads are the builder's claims, so the restore
// checks everything again from the verified checkpoint.
func (ap *app) precheckImage(ctx context.Context, cmd *cobra.Command, im *ociimage.Image) error {
	sum := ociimage.FromManifest(im.Manifest)
	switch im.Kind() {
	case ociimage.KindProcess:
		if err := precheck.PIDsFree(treePIDs(sum)); err != nil {
			return err
		}
	case ociimage.KindPodman:
		global := podmanGlobal(cmd)
		if err := podman.NameIn(ctx, global, cmp.Or(fString(cmd, "name"), sum.Name)); err != nil {
			return err
		}
		if err := podman.Image(ctx, global, sum.BaseImage); err != nil {
			return err
		}
	case ociimage.KindContainerd:
		if err := ctrd.Precheck(ctx, ctrd.PrecheckOptions{Options: containerdOptions(cmd),
			Name: cmp.Or(fString(cmd, "name"), sum.Name), BaseImage: sum.BaseImage,
			GPUs: splitGPUs(fString(cmd, "gpus")), Inventory: cuda.New(ap.runtimeDriverOptions()).Inventory,
			Log: restoreLog(ap.messages(), fBool(cmd, "quiet"))}); err != nil {
			return err
		}
	}
	return ap.gpuHint(ctx, cmd, im.Ref, im.Kind(), sum)
}

// treePIDs are the pids of the checkpoint's process tree, which CRIU gives
// back (threads are checked after the unpack, from pstree.img).
func treePIDs(sum *ociimage.Summary) []int {
	var pids []int
	for _, p := range sum.Processes {
		if p.PID > 0 {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// gpuHint matches the GPUs the annotations say the checkpoint needs
// (count, model, memory, driver) against this host's. It checks nothing
// where the annotations say nothing, where this cryo cannot read the
// host's GPUs (the restore, or containerd's shim, checks them where they
// are), or where the user chose the GPUs by UUID (--gpu-map names source
// GPUs that the annotations do not list: the full check answers it).
func (ap *app) gpuHint(ctx context.Context, cmd *cobra.Command, ref string, kind ociimage.Kind, sum *ociimage.Summary) error {
	if len(sum.GPUs) == 0 || cmd.Flags().Changed("gpu-map") || (kind == ociimage.KindContainerd && fString(cmd, "gpus") != "") {
		return nil
	}
	host, err := cuda.New(ap.runtimeDriverOptions()).Inventory(ctx)
	if err != nil {
		return nil
	}
	m := annotatedManifest(sum)
	if _, err := manifest.CheckHost(m, host, host.GPUs, nil); err != nil {
		msg := fmt.Errorf("%s does not fit this host (by the GPU needs in its annotations, checked before unpacking): %w", ref, err)
		if !hasRemedy(err) {
			msg = report.WithRemedy(msg, "restore on a host with those GPUs and driver, or "+otherGPUsRemedy(kind))
		}
		return msg
	}
	return nil
}

// hasRemedy reports whether err brings its own remedy: as a value, or
// still written into the message (manifest.HostError's driver check), so
// that a second one is not added.
func hasRemedy(err error) bool {
	var rm report.Remedied
	_, _, written := report.Split(err.Error())
	return errors.As(err, &rm) || written
}

// annotatedManifest is a manifest made of the annotations' claims: one
// process that may go to any GPU (the annotations do not say which GPUs
// each process saw), needing count GPUs of the model with the memory.
func annotatedManifest(sum *ociimage.Summary) *manifest.Manifest {
	m := &manifest.Manifest{Version: 2, Inventory: cuda.Inventory{DriverVersion: sum.Driver},
		Processes: []manifest.Process{{PID: 1, State: "checkpointed"}}}
	for i, g := range sum.GPUs {
		g.UUID = fmt.Sprintf("its GPU %d", i) // the annotations name no UUID
		m.Needs = append(m.Needs, g)
	}
	return m
}
