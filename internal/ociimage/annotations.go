// Package ociimage turns a checkpoint into a standard OCI image and back:
// build (from a cryo checkpoint directory, a Podman/CRI-O export, or a
// containerd checkpoint), a local OCI-layout store, push and pull to any
// registry, verified unpacking, and inspection.
//
// The image follows the checkpoint image of Podman, CRI-O and checkpointctl:
// its layers, stacked, hold exactly what a checkpoint export holds
// (checkpoint/ with the CRIU images, config.dump, spec.dump,
// rootfs-diff.tar, …), and the manifest carries their annotations. cryo adds
// its own annotations for what a scheduler needs to know without pulling:
// the GPU model, count, memory and driver.
package ociimage

import metadata "github.com/checkpoint-restore/checkpointctl/lib"

// Annotations read by checkpointctl and CRI-O, named by checkpointctl's lib.
const (
	AnnCRIUContainerName = metadata.CheckpointAnnotationName
	AnnCRIURootfsImage   = metadata.CheckpointAnnotationRootfsImageName
	AnnCRIUEngine        = metadata.CheckpointAnnotationEngine
	AnnCRIUEngineVersion = metadata.CheckpointAnnotationEngineVersion
)

// Annotations read by Podman (`podman container restore IMAGE`).
const (
	AnnPodmanName         = "io.podman.annotations.checkpoint.name"
	AnnPodmanRawImageName = "io.podman.annotations.checkpoint.rawImageName"
	AnnPodmanRootfsImage  = "io.podman.annotations.checkpoint.rootfsImageName"
	AnnPodmanRootfsID     = "io.podman.annotations.checkpoint.rootfsImageID"
	AnnPodmanRuntime      = "io.podman.annotations.checkpoint.runtime.name"
)

// cryo's annotations. Sizes are decimal bytes.
const (
	annPrefix       = "io.github.cryo-gpu.checkpoint."
	AnnKind         = annPrefix + "kind" // process, podman, containerd, kubelet
	AnnHost         = annPrefix + "host"
	AnnName         = annPrefix + "name"
	AnnProcesses    = annPrefix + "processes" // "pid:comm[*],…"; * marks CUDA
	AnnGPUModel     = annPrefix + "gpu.model"
	AnnGPUCount     = annPrefix + "gpu.count"
	AnnGPUCompute   = annPrefix + "gpu.compute-capability"
	AnnGPUMemory    = annPrefix + "gpu.memory"
	AnnGPUDriver    = annPrefix + "gpu.driver"
	AnnCUDAVersion  = annPrefix + "gpu.cuda"
	AnnCryoVersion  = annPrefix + "cryo.version" // the cryo that took the checkpoint
	AnnCRIUVersion  = annPrefix + "criu.version"
	AnnKernel       = annPrefix + "kernel" // the release the checkpoint was taken on
	AnnSizeGPU      = annPrefix + "size.gpu-memory"
	AnnSizeHost     = annPrefix + "size.host-memory"
	AnnSizeRootfs   = annPrefix + "size.rootfs-diff"
	AnnSizeTotal    = annPrefix + "size.total"
	AnnLayerPart    = annPrefix + "layer" // on a layer: base, rootfs, pages
	AnnOCICreated   = "org.opencontainers.image.created"
	AnnOCIRefName   = "org.opencontainers.image.ref.name"
	engineName      = "cryo"
	checkpointDir   = metadata.CheckpointDirectory
	configDumpName  = metadata.ConfigDumpFile
	statusDumpName  = metadata.StatusDumpFile // CRI's container status, in a kubelet archive
	statsDumpName   = "stats-dump"            // CRIU's dump statistics (checkpointctl inspect --stats)
	cryoImageConfig = "cryo-image.json"
)

// Files of an unpacked container checkpoint besides checkpoint/ (see
// CRIUDir), named as in Podman's export.
const (
	RootfsDiffName = metadata.RootFsDiffTar // the rw layer, an uncompressed layer tar
	SpecDumpName   = metadata.SpecDumpFile  // the container's OCI runtime spec
)

// Layer parts.
const (
	PartBase   = "base"
	PartRootfs = "rootfs"
	PartPages  = "pages"
)

// isCheckpointImage reports whether manifest annotations mark a checkpoint.
func isCheckpointImage(ann map[string]string) bool {
	return ann[AnnCRIUContainerName] != "" || ann[AnnPodmanName] != "" || ann[AnnKind] != ""
}

// imageKind is a checkpoint image's kind: cryo's annotation, or, on an
// image cryo did not build (`podman container checkpoint --create-image`,
// `checkpointctl build`), the Podman/CRI-O export that its one layer holds.
func imageKind(ann map[string]string) Kind {
	if k := Kind(ann[AnnKind]); k != "" {
		return k
	}
	if isCheckpointImage(ann) {
		return KindPodman
	}
	return ""
}

// builtByCryo reports whether cryo built the image, so that its annotations
// say everything a summary shows, GPUs included.
func builtByCryo(ann map[string]string) bool { return ann[AnnKind] != "" }
