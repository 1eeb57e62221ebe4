package gce

import (
	"context"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// insertImage images a disk into a family, through the provider's own
// images client (the image build pipeline's call).
func insertImage(ctx context.Context, p *Provider, name, disk, family string) error {
	op, err := p.imagesAPI.Insert(ctx, &computepb.InsertImageRequest{Project: p.o.Project, ForceCreate: proto.Bool(true),
		ImageResource: &computepb.Image{Name: proto.String(name), SourceDisk: proto.String(disk), Family: proto.String(family)}})
	if err != nil {
		return err
	}
	return p.waitGlobalProto(ctx, op.Proto())
}
